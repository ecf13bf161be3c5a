"""compose.yaml describes the same topology as make demo, with commands the image provides."""

import configparser
import re
from pathlib import Path

import yaml

from app.config import KNOWN_VARIABLES
from services.runtime import Limits

REPO = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((REPO / "compose.yaml").read_text())
SERVICES = COMPOSE["services"]
NGINX_CONF = (REPO / "deploy" / "nginx.conf").read_text()


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
        "coordinator",
        "nginx",
        "worker-1",
        "worker-2",
    }


def test_postgres_is_15_or_newer_with_a_volume_and_health_check():
    pg = SERVICES["postgres"]
    assert int(re.match(r"postgres:(\d+)", pg["image"]).group(1)) >= 15
    assert pg["volumes"] and pg["healthcheck"]["test"]


def test_coordinator_waits_for_migrate_and_checks_readyz():
    coordinator = SERVICES["coordinator"]
    assert coordinator["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert "/readyz" in " ".join(coordinator["healthcheck"]["test"])


def test_every_command_is_an_entry_point_of_the_image():
    # gunicorn, flask and yoyo come with their packages; ours come from setup.cfg.
    provided = console_scripts() | {"gunicorn", "flask", "yoyo", "sh"}
    for name, service in SERVICES.items():
        if "command" in service:
            assert service["command"][0] in provided, name
    assert SERVICES["seed"]["command"][-1] == "seed-local"
    assert "yoyo apply" in SERVICES["migrate"]["command"][-1]


def test_only_nginx_is_published_and_on_loopback_unless_told_otherwise():
    published = {name: s["ports"] for name, s in SERVICES.items() if s.get("ports")}
    assert published == {"nginx": ["${CHUNKWISE_PUBLISH:-127.0.0.1}:8000:8080"]}


def test_nginx_serves_the_repositorys_config_in_front_of_the_coordinator():
    nginx = SERVICES["nginx"]
    assert "./deploy/nginx.conf:/etc/nginx/conf.d/default.conf:ro" in nginx["volumes"]
    assert nginx["depends_on"]["coordinator"]["condition"] == "service_healthy"
    assert "server coordinator:8000;" in NGINX_CONF and "listen 8080;" in NGINX_CONF
    for name in ("worker-1", "worker-2"):
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
    for name in ("worker-1", "worker-2"):
        token = SERVICES[name]["environment"]["CHUNKWISE_WORKER_TOKEN"]
        assert token.startswith("${CHUNKWISE_SEED_WORKER_TOKEN:?"), token


def test_no_token_placeholder_is_left_in_compose():
    assert "change-me" not in (REPO / "compose.yaml").read_text()


def test_workers_never_receive_database_credentials():
    for name in ("worker-1", "worker-2"):
        env = SERVICES[name]["environment"]
        assert "DATABASE_URL" not in env
        assert {"CHUNKWISE_URL", "CHUNKWISE_WORKER_TOKEN"} <= set(env)


def test_environment_names_are_settings_the_code_reads():
    names = set()
    for service in SERVICES.values():
        names |= {n for n in service.get("environment", {}) if n.startswith("CHUNKWISE_")}
    dockerfile = (REPO / "Dockerfile").read_text()
    names |= set(re.findall(r"\b(CHUNKWISE_[A-Z_]+)=", dockerfile))
    assert names, "expected CHUNKWISE_ variables in compose.yaml and the Dockerfile"
    assert names <= KNOWN_VARIABLES, names - KNOWN_VARIABLES
