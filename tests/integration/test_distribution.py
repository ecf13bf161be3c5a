"""A pip-installed server carries its migrations, and refuses readiness when it knows none."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import psycopg
import pytest

from app import create_app, migrations
from app.config import REPO_ROOT
from app.runtime import close

# What a build reads; copied, because pip builds in place and would leave build/ behind.
SOURCES = (
    "setup.cfg",
    "pyproject.toml",
    "README.md",
    "app",
    "services",
    "repositories",
    "worker_cli",
    "sql",
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The chunkwise wheel built from this checkout, as `pip wheel --no-deps .` builds it."""
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    for name in SOURCES:
        if (REPO_ROOT / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__")
            shutil.copytree(REPO_ROOT / name, source / name, ignore=ignore)
        else:
            shutil.copy(REPO_ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), "."],
        cwd=source,
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("chunkwise-*.whl")
    return built


def test_the_wheel_holds_every_migration_under_app_sql(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())

    expected = {f"app/sql/{p.name}" for p in (REPO_ROOT / "sql").glob("*.sql")}
    assert expected
    assert expected <= names


def test_the_wheel_holds_every_python_package_of_the_checkout(wheel):
    # setup.cfg lists its packages (find: cannot map sql/ into app/sql): a new one must be listed.
    names = set(zipfile.ZipFile(wheel).namelist())
    top = configparser.ConfigParser()
    top.read(REPO_ROOT / "setup.cfg")
    roots = {p.split(".")[0] for p in top["options"]["packages"].split()}

    packages = {
        str(init.parent.relative_to(REPO_ROOT))
        for root in roots
        for init in (REPO_ROOT / root).rglob("__init__.py")
    }

    assert {f"{p}/__init__.py" for p in packages} <= names


def test_an_installed_server_applies_its_migrations_from_the_package(
    wheel, tmp_path, empty_database_url
):
    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    # Run away from the checkout, with the installed copy first on the path.
    env = {**os.environ, "PYTHONPATH": str(target), "DATABASE_URL": empty_database_url}
    env.pop("CHUNKWISE_MIGRATIONS_DIR", None)

    where = subprocess.run(
        [sys.executable, "-c", "from app import migrations; print(migrations.MIGRATIONS_DIR)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.strip() == str(target / "app" / "sql")

    done = subprocess.run(
        [sys.executable, "-m", "app.migrations", "apply"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    with psycopg.connect(empty_database_url) as conn:
        applied = {r[0] for r in conn.execute("SELECT migration_id FROM _yoyo_migration")}
    assert applied == set(migrations.migration_ids())


@pytest.fixture
def app_without_migrations(app_config, tmp_path):
    """A coordinator whose CHUNKWISE_MIGRATIONS_DIR holds no migration, as a bare install would."""
    empty = tmp_path / "no-sql"
    empty.mkdir()
    flask_app = create_app({**app_config, "CHUNKWISE_MIGRATIONS_DIR": str(empty)})
    yield flask_app
    close(flask_app.extensions["chunkwise.runtime"])


def test_readyz_is_503_naming_it_when_the_coordinator_knows_no_migrations(
    app_without_migrations,
):
    response = app_without_migrations.test_client().get("/readyz")

    assert response.status_code == 503
    error = response.get_json()["error"]
    assert error["code"] == "no_migrations"
    assert "knows no migrations" in error["message"]
    assert "CHUNKWISE_MIGRATIONS_DIR" in error["message"]
