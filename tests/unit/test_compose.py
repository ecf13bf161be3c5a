"""compose.yaml describes the same topology as make demo, with commands the image provides."""

import configparser
import re
from pathlib import Path

import yaml

from app.config import KNOWN_VARIABLES

REPO = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((REPO / "compose.yaml").read_text())
SERVICES = COMPOSE["services"]


def console_scripts() -> set[str]:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    lines = cfg["options.entry_points"]["console_scripts"].strip().splitlines()
    return {line.split("=")[0].strip() for line in lines}


def test_compose_has_every_service_of_the_stack():
    assert set(SERVICES) == {"postgres", "migrate", "seed", "coordinator", "worker-1", "worker-2"}


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
