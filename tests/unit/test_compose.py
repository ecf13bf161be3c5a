"""compose.yaml describes issue 38's topology (two coordinators behind nginx, one PostgreSQL, an
S3 bucket, workers) with commands the image provides, stopped and restarted as they promise."""

import configparser
import os
import re
import stat
import subprocess
from pathlib import Path

import yaml

from app.config import KNOWN_VARIABLES
from services.runtime import Limits
from worker_cli.worker_config import WorkerConfig

REPO = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((REPO / "compose.yaml").read_text())
SERVICES = COMPOSE["services"]
NGINX_CONF = (REPO / "deploy" / "nginx.conf").read_text()
COORDINATORS = ("coordinator-1", "coordinator-2")
# The body of deploy/nginx.conf's upstream block.
UPSTREAM = re.search(r"upstream coordinator \{(.*?)\}", NGINX_CONF, re.DOTALL).group(1)
WORKERS = ("worker-1", "worker-2")
# Services that run the project's image (every one but postgres, minio and nginx).
PROJECT_IMAGE = "chunkwise:local"
# Settings whose value is a secret: a password, key, token or MinIO's root user (half its login).
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|KEY|MINIO_ROOT_USER")
# A value compose refuses to start without: ${NAME:?why}.
REQUIRED = re.compile(r"\$\{[A-Z_]+:\?[^}]+\}")


def console_scripts() -> set[str]:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    lines = cfg["options.entry_points"]["console_scripts"].strip().splitlines()
    return {line.split("=")[0].strip() for line in lines}


def test_compose_has_every_service_of_the_stack():
    assert set(SERVICES) == {
        "postgres",
        "migrate",
        "seed",
        "minio",
        "bucket",
        "coordinator-1",
        "coordinator-2",
        "nginx",
        "worker-1",
        "worker-2",
    }


def test_postgres_is_15_or_newer_with_a_volume_and_health_check():
    pg = SERVICES["postgres"]
    assert int(re.match(r"postgres:(\d+)", pg["image"]).group(1)) >= 15
    assert pg["volumes"] and pg["healthcheck"]["test"]


def test_coordinators_wait_for_migrate_and_the_bucket_and_check_readyz():
    for name in COORDINATORS:
        coordinator = SERVICES[name]
        for step in ("migrate", "seed", "bucket"):
            assert coordinator["depends_on"][step]["condition"] == "service_completed_successfully"
        assert "/readyz" in " ".join(coordinator["healthcheck"]["test"])


def test_every_command_is_an_entry_point_of_the_image():
    # gunicorn and flask come with their packages; ours come from setup.cfg.
    provided = console_scripts() | {"gunicorn", "flask", "python"}
    for name, service in SERVICES.items():
        if service.get("image") == PROJECT_IMAGE:
            assert service["command"][0] in provided, name
    assert SERVICES["seed"]["command"][-1] == "seed-local"
    assert SERVICES["migrate"]["command"] == ["python", "-m", "app.migrations", "apply"]


def test_no_secret_is_put_on_a_command_line():
    # Interpolated by compose (${X}) or by a shell ($${X}), it would show in ps and docker top.
    secret = re.compile(r"\$\$?\{?[A-Z_]*(" + SECRET_NAME.pattern + r"|DATABASE_URL)")
    for path in (REPO / "compose.yaml", REPO / "deploy" / "compose.s3-standin.yaml"):
        for name, service in yaml.safe_load(path.read_text())["services"].items():
            for argv in (
                service.get("command", []),
                service.get("healthcheck", {}).get("test", []),
            ):
                line = argv if isinstance(argv, str) else " ".join(argv)
                assert not secret.search(line), (path.name, name, line)


def test_only_nginx_is_published_and_on_loopback_unless_told_otherwise():
    published = {name: s["ports"] for name, s in SERVICES.items() if s.get("ports")}
    assert published == {"nginx": ["${CHUNKWISE_PUBLISH:-127.0.0.1}:8000:8080"]}


def test_nginx_serves_the_repositorys_config_in_front_of_the_coordinator():
    nginx = SERVICES["nginx"]
    assert "./deploy/nginx.conf:/etc/nginx/conf.d/default.conf:ro" in nginx["volumes"]
    assert "listen 8080;" in NGINX_CONF
    for name in WORKERS:
        assert SERVICES[name]["environment"]["CHUNKWISE_URL"] == "http://nginx:8080"


def test_nginx_bounds_slow_clients_and_buffers_whole_requests():
    directives = dict(re.findall(r"^\s*([a-z_]+) ([^;{]+);", NGINX_CONF, re.MULTILINE))
    assert directives["client_header_timeout"] == "10s"
    assert directives["client_body_timeout"] == "30s"
    assert directives["send_timeout"] == "30s"
    assert directives["proxy_request_buffering"] == "on"
    # Above the longest long poll the API allows (wait_seconds <= 30).
    assert int(directives["proxy_read_timeout"].rstrip("s")) > 30
    # The app takes CHUNKWISE_MAX_UPLOAD_BYTES plus 1 MiB for the form's other fields.
    expected = (Limits().max_upload_bytes + 1024 * 1024) // (1024 * 1024)
    assert directives["client_max_body_size"] == f"{expected}m"


def test_the_seed_tokens_have_no_defaults_and_are_required():
    env = COMPOSE["x-chunkwise-env"]
    for name in (
        "CHUNKWISE_SEED_USER_TOKEN",
        "CHUNKWISE_SEED_OPERATOR_TOKEN",
        "CHUNKWISE_SEED_WORKER_TOKEN",
    ):
        assert re.fullmatch(rf"\$\{{{name}:\?[^}}]+\}}", env[name]), env[name]
    for name in WORKERS:
        token = SERVICES[name]["environment"]["CHUNKWISE_WORKER_TOKEN"]
        assert token.startswith("${CHUNKWISE_SEED_WORKER_TOKEN:?"), token


def test_no_token_placeholder_is_left_in_compose():
    assert "change-me" not in (REPO / "compose.yaml").read_text()


def test_every_password_secret_and_token_in_compose_is_a_required_variable():
    secrets_seen = set()
    for name, service in SERVICES.items():
        for setting, value in service.get("environment", {}).items():
            if setting == "DATABASE_URL":
                # Not urlsplit: the ? of ${...:?...} would end its host part.
                url = re.fullmatch(r"postgresql://chunkwise:(.+)@postgres:5432/chunkwise", value)
                assert url, (name, value)
                assert url.group(1) == SERVICES["postgres"]["environment"]["POSTGRES_PASSWORD"]
            elif SECRET_NAME.search(setting):
                secrets_seen.add(setting)
                # Unset, the scrape token is no token at all: /metrics takes operators' alone.
                if value != "${CHUNKWISE_METRICS_TOKEN:-}":
                    assert REQUIRED.fullmatch(value), (name, setting, value)
    assert SERVICES["postgres"]["environment"]["POSTGRES_PASSWORD"].startswith(
        "${POSTGRES_PASSWORD:?"
    )
    assert {
        "POSTGRES_PASSWORD",
        "MINIO_ROOT_USER",
        "MINIO_ROOT_PASSWORD",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "CHUNKWISE_SECRET_KEY",
        "CHUNKWISE_SEED_USER_TOKEN",
        "CHUNKWISE_WORKER_TOKEN",
    } <= secrets_seen, secrets_seen
    assert "chunkwise:chunkwise@" not in (REPO / "compose.yaml").read_text()


def test_workers_never_receive_database_or_bucket_credentials():
    for name in WORKERS:
        env = SERVICES[name]["environment"]
        assert "DATABASE_URL" not in env
        assert not [n for n in env if n.startswith(("AWS_", "MINIO_"))], env
        assert {"CHUNKWISE_URL", "CHUNKWISE_WORKER_TOKEN"} <= set(env)


def test_workers_share_a_network_with_nginx_alone():
    # Without credentials is not enough: a worker could still reach PostgreSQL and try passwords.
    networks = {name: set(s.get("networks", ["default"])) for name, s in SERVICES.items()}
    for name in WORKERS:
        assert networks[name] == {"workers"}, networks[name]
        assert SERVICES[name]["environment"]["CHUNKWISE_URL"].startswith("http://nginx:")
    assert [name for name in SERVICES if "workers" in networks[name]] == ["nginx", *WORKERS]
    assert networks["nginx"] == {"default", "workers"}


def test_environment_names_are_settings_the_code_reads():
    names = set()
    for service in SERVICES.values():
        names |= {n for n in service.get("environment", {}) if n.startswith("CHUNKWISE_")}
    dockerfile = (REPO / "Dockerfile").read_text()
    names |= set(re.findall(r"\b(CHUNKWISE_[A-Z_]+)=", dockerfile))
    assert names, "expected CHUNKWISE_ variables in compose.yaml and the Dockerfile"
    assert names <= KNOWN_VARIABLES, names - KNOWN_VARIABLES


def seconds(duration: str) -> int:
    """A compose duration such as 40s or 1m30s, in seconds."""
    parts = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", duration)
    assert parts and duration, duration
    return int(parts.group(1) or 0) * 60 + int(parts.group(2) or 0)


def test_nginx_looks_the_coordinators_up_as_they_come_and_go():
    # Resolved once at start, a stopped coordinator's name keeps nginx from starting at all.
    servers = re.findall(r"^\s*server coordinator-\d+:\d+\b([^;]*);", UPSTREAM, re.MULTILINE)
    assert len(servers) == len(COORDINATORS)
    assert all("resolve" in parameters.split() for parameters in servers)
    assert re.search(r"^\s*zone coordinator \d+k;", UPSTREAM, re.MULTILINE)
    # At the http level (the file is included there): Docker's DNS, asked again every 10 s.
    assert re.search(r"^resolver 127\.0\.0\.11 valid=10s\b", NGINX_CONF, re.MULTILINE)
    major, minor = map(int, SERVICES["nginx"]["image"].partition(":")[2].split(".")[:2])
    assert (major, minor) >= (1, 28)  # `resolve` is in nginx since 1.27.3


def test_nginx_balances_both_coordinators_once_both_are_healthy():
    servers = re.findall(r"^\s*server ([\w.-]+):(\d+)\b", UPSTREAM, re.MULTILINE)
    port = SERVICES["coordinator-1"]["environment"]["CHUNKWISE_BIND"].rpartition(":")[2]
    assert servers == [(name, port) for name in COORDINATORS]
    assert "proxy_pass http://coordinator;" in NGINX_CONF
    for name in COORDINATORS:
        assert SERVICES["nginx"]["depends_on"][name]["condition"] == "service_healthy"


def test_only_a_claim_is_resent_to_the_other_coordinator_after_a_reset():
    locations = dict(re.findall(r"location ([^{]+?) \{(.*?)\}", NGINX_CONF, re.DOTALL))
    claim = locations["= /api/v1/tasks/claim"]
    assert "proxy_pass http://coordinator;" in claim
    assert re.search(r"proxy_next_upstream [^;]*\bnon_idempotent\b", claim)
    # A result or a job sent twice would be refused or doubled: never resent.
    assert "non_idempotent" not in NGINX_CONF.replace(claim, "")


def test_coordinators_share_the_bucket_the_session_key_and_the_scrape_token():
    first, second = (SERVICES[name]["environment"] for name in COORDINATORS)
    assert first == second
    assert first["CHUNKWISE_ARCHIVE_URL"] == "s3://chunkwise/inputs"
    assert first["AWS_ENDPOINT_URL"] == "http://minio:9000"
    assert first["CHUNKWISE_SECRET_KEY"].startswith("${CHUNKWISE_SECRET_KEY:?")
    assert first["CHUNKWISE_METRICS_TOKEN"] == "${CHUNKWISE_METRICS_TOKEN:-}"
    # No directory archive beside the bucket: an upload must be servable by either.
    assert "CHUNKWISE_ARCHIVE_DIR" not in first
    assert not any("archive" in v for n in COORDINATORS for v in SERVICES[n].get("volumes", []))
    # The two are told apart in the coordinators registry and in /readyz's details.
    assert [SERVICES[n]["hostname"] for n in COORDINATORS] == list(COORDINATORS)


def test_the_bucket_one_shot_creates_the_archives_bucket_with_minios_credentials():
    bucket, minio = SERVICES["bucket"], SERVICES["minio"]
    assert bucket["depends_on"]["minio"]["condition"] == "service_healthy"
    assert 's3.create_bucket(Bucket="chunkwise")' in bucket["command"][-1]
    env = bucket["environment"]
    assert env["AWS_ACCESS_KEY_ID"] == minio["environment"]["MINIO_ROOT_USER"]
    assert env["AWS_SECRET_ACCESS_KEY"] == minio["environment"]["MINIO_ROOT_PASSWORD"]
    assert env == {k: v for k, v in SERVICES["coordinator-1"]["environment"].items() if k in env}


def test_minio_is_the_real_image_pinned_with_a_volume_and_health_check():
    minio = SERVICES["minio"]
    assert re.fullmatch(r"minio/minio:RELEASE\.[0-9TZ-]+", minio["image"]), minio["image"]
    assert minio["volumes"] and minio["healthcheck"]["test"]
    for name in ("MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD"):
        assert minio["environment"][name].startswith(f"${{{name}:?"), name


def test_the_local_s3_stand_in_replaces_only_minio_and_is_not_the_default():
    override = yaml.safe_load((REPO / "deploy" / "compose.s3-standin.yaml").read_text())
    assert set(override["services"]) == {"minio"}
    assert "STAND-IN" in (REPO / "deploy" / "compose.s3-standin.yaml").read_text()
    assert "standin" not in (REPO / "Makefile").read_text()


def test_coordinators_and_workers_are_given_longer_than_their_drain_to_stop():
    conf = (REPO / "gunicorn.conf.py").read_text()
    graceful = int(re.search(r"^graceful_timeout = (\d+)$", conf, re.MULTILINE).group(1))
    worker_grace = WorkerConfig.__dataclass_fields__["grace_seconds"].default
    for name in COORDINATORS:
        assert seconds(SERVICES[name]["stop_grace_period"]) > graceful, name
    for name in WORKERS:
        assert seconds(SERVICES[name]["stop_grace_period"]) > worker_grace, name


def test_long_running_services_restart_and_one_shots_do_not():
    for name in ("postgres", "minio", *COORDINATORS, "nginx", *WORKERS):
        assert SERVICES[name]["restart"] == "unless-stopped", name
    for name in ("migrate", "seed", "bucket"):
        assert SERVICES[name]["restart"] == "no", name


def test_the_image_is_built_once_and_every_python_service_runs_it():
    built = [name for name, service in SERVICES.items() if "build" in service]
    assert built == ["migrate"]
    runs_it = {name for name, service in SERVICES.items() if service["image"] == PROJECT_IMAGE}
    assert runs_it == {"migrate", "seed", "bucket", *COORDINATORS, *WORKERS}
    # The others never look for it in a registry (a failed pull before every build).
    assert {SERVICES[name].get("pull_policy") for name in runs_it - {"migrate"}} == {"never"}


def test_no_project_name_so_each_checkout_runs_a_stack_of_its_own():
    assert "name" not in COMPOSE


def make_up(directory: Path) -> dict[str, str]:
    """Run the Makefile's up target in directory, docker a no-op, and return the .env it left."""
    fake = directory / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "docker").write_text("#!/bin/sh\nexit 0\n")
    (fake / "docker").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    makefile = str(REPO / "Makefile")
    subprocess.run(["make", "-s", "-f", makefile, "up"], cwd=directory, env=env, check=True)
    lines = (directory / ".env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def test_make_up_writes_every_secret_compose_requires_privately_and_url_safe(tmp_path):
    required = set(re.findall(r"\$\{([A-Z_]+):\?", (REPO / "compose.yaml").read_text()))
    assert "POSTGRES_PASSWORD" in required, required

    written = make_up(tmp_path)

    assert required | {"CHUNKWISE_METRICS_TOKEN"} <= set(written), required - set(written)
    assert stat.S_IMODE((tmp_path / ".env").stat().st_mode) == 0o600
    # No two alike, and each long enough to guess no sooner than a 32-byte token.
    assert len(set(written.values())) == len(written)
    for name, value in written.items():
        if name != "MINIO_ROOT_USER":
            assert len(value) >= 43, name
    # It sits inside DATABASE_URL as it is, so nothing in it may need quoting.
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", written["POSTGRES_PASSWORD"])


def test_make_up_keeps_the_secrets_an_env_file_has_and_adds_those_it_lacks(tmp_path):
    (tmp_path / ".env").write_text("CHUNKWISE_SECRET_KEY=mine\n")

    first = make_up(tmp_path)
    second = make_up(tmp_path)

    assert first["CHUNKWISE_SECRET_KEY"] == "mine"
    assert "POSTGRES_PASSWORD" in first
    assert second == first


def test_make_up_makes_an_older_env_file_private_and_keeps_its_lines(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("# mine\nCHUNKWISE_SECRET_KEY=mine\nOTHER=kept")  # last line unended
    env_file.chmod(0o644)

    make_up(tmp_path)
    after_first = env_file.read_text()
    mode_after_first = stat.S_IMODE(env_file.stat().st_mode)
    env_file.chmod(0o644)  # as an editor or a copy might leave it
    make_up(tmp_path)  # with nothing left to add

    assert after_first.startswith("# mine\nCHUNKWISE_SECRET_KEY=mine\nOTHER=kept\n")
    assert "POSTGRES_PASSWORD=" in after_first
    assert mode_after_first == 0o600
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert env_file.read_text() == after_first


def test_the_dockerfile_installs_the_locked_versions():
    dockerfile = (REPO / "Dockerfile").read_text()
    installs = re.findall(r"pip install[^&\n]*", dockerfile)
    assert installs and all("-c requirements.lock" in line for line in installs), installs
    assert re.search(r"^COPY [^\n]*\brequirements\.lock\b", dockerfile, re.MULTILINE)


def test_a_code_edit_reuses_the_layer_that_installs_the_dependencies():
    lines = (REPO / "Dockerfile").read_text().splitlines()
    first_install = next(i for i, line in enumerate(lines) if "pip install" in line)
    code = [i for i, line in enumerate(lines) if re.match(r"COPY (app|services)\b", line)]
    assert code and first_install < min(code), (first_install, code)
    # The dependencies' layer is keyed by what names them, and nothing else of the project.
    copied_before = [line for line in lines[:first_install] if line.startswith("COPY ")]
    assert copied_before == ["COPY setup.cfg requirements.lock ./"], copied_before


def test_the_build_context_leaves_out_secrets_and_local_state_but_not_what_is_copied():
    ignored = {
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".env", ".git", ".venv", ".run", "reports", "**/__pycache__"} <= ignored
    copied = re.findall(r"^COPY (.+) \S+$", (REPO / "Dockerfile").read_text(), re.MULTILINE)
    sources = {source for line in copied for source in line.split()}
    assert sources and not sources & ignored, sources & ignored


def test_gunicorn_opens_no_control_socket_and_the_locked_gunicorn_knows_the_setting():
    from gunicorn.config import KNOWN_SETTINGS

    conf = (REPO / "gunicorn.conf.py").read_text()
    assert re.search(r"^control_socket_disable = True$", conf, re.MULTILINE)
    assert "control_socket_disable" in {setting.name for setting in KNOWN_SETTINGS}
