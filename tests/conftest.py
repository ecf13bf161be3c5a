"""Fixtures shared by every test layer: a PostgreSQL server, fresh migrated databases, the app."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import psycopg
import pytest
from flask.testing import FlaskClient
from psycopg.conninfo import conninfo_to_dict
from pytest_postgresql.janitor import DatabaseJanitor

from app import migrations
from devstack.stack import stop_on_sigterm

TEMPLATE_DB = f"chunkwise_template_{os.getpid()}"


def pytest_configure(config) -> None:
    """An interrupted run, by Ctrl-C or SIGTERM, tears down its servers and stacks."""
    stop_on_sigterm()


@pytest.fixture(scope="session")
def pg_server() -> dict:
    """Connection parameters of the server: TEST_DATABASE_URL's, else an embedded one."""
    url = os.environ.get("TEST_DATABASE_URL")
    if not url:
        from devstack import embedded_pg

        # Not under pytest's basetemp: every pytest session that starts makes that 0700,
        # which locks the server's own user out of its data mid-run (PANIC on pg_control).
        home = Path(tempfile.mkdtemp(prefix="chunkwise-test-pg-"))
        # Registered first, so it runs after the server's own exit handler has stopped it.
        atexit.register(shutil.rmtree, home, ignore_errors=True)
        url = embedded_pg.start(home / "data", keep=False)
    params = conninfo_to_dict(url)
    return {
        "host": params.get("host", "127.0.0.1"),
        "port": int(params.get("port", 5432)),
        "user": params.get("user", "postgres"),
        "password": params.get("password"),
    }


def url_for(server: dict, dbname: str) -> str:
    """A postgresql:// URL for a database on the test server."""
    params = {"host": server["host"], "port": server["port"], "user": server["user"]}
    host = params["host"]
    if host.startswith("/"):
        return f"postgresql://{params['user']}@/{dbname}?host={host}&port={params['port']}"
    password = f":{server['password']}" if server["password"] else ""
    return f"postgresql://{params['user']}{password}@{host}:{params['port']}/{dbname}"


@pytest.fixture(scope="session")
def template_db(pg_server) -> str:
    """A database migrated to head once per session, cloned for each test."""
    janitor = DatabaseJanitor(
        user=pg_server["user"],
        host=pg_server["host"],
        port=pg_server["port"],
        password=pg_server["password"],
        dbname=TEMPLATE_DB,
        as_template=True,
    )
    janitor.init()
    migrations.apply(url_for(pg_server, TEMPLATE_DB))
    yield TEMPLATE_DB
    janitor.drop()


def fresh_database(pg_server: dict, template: str | None):
    """A janitor for a new database named uniquely, optionally cloned from a template."""
    return DatabaseJanitor(
        user=pg_server["user"],
        host=pg_server["host"],
        port=pg_server["port"],
        password=pg_server["password"],
        dbname=f"chunkwise_test_{uuid.uuid4().hex[:12]}",
        template_dbname=template,
    )


@pytest.fixture
def database_url(pg_server, template_db):
    """A fresh database at the current schema, dropped after the test."""
    with fresh_database(pg_server, template_db) as janitor:
        yield url_for(pg_server, janitor.dbname)


@pytest.fixture
def empty_database_url(pg_server):
    """A fresh database with no schema at all."""
    with fresh_database(pg_server, None) as janitor:
        yield url_for(pg_server, janitor.dbname)


@pytest.fixture
def db(database_url):
    """A direct autocommit connection to the test database, for assertions."""
    with psycopg.connect(database_url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        yield conn


@pytest.fixture
def app_config(database_url, tmp_path: Path, request) -> dict:
    """Environment overrides for create_app in tests, plus any a test asks for with @settings."""
    return {
        "DATABASE_URL": database_url,
        "CHUNKWISE_TEMP_DIR": str(tmp_path / "tmp"),
        "CHUNKWISE_ARCHIVE_DIR": str(tmp_path / "archive"),
        "CHUNKWISE_DB_POOL_MIN": "1",
        "CHUNKWISE_DB_POOL_MAX": "12",
        "CHUNKWISE_ALLOWED_WORKLOADS": "render,echo",
        "CHUNKWISE_LOG_LEVEL": "WARNING",
        # Retries at once, as the protocol's tests expect; the backoff's own tests set theirs.
        "CHUNKWISE_RETRY_DELAY_SECONDS": "0",
        # The queue caps' tests fill a queue as one user; the fair share's tests set theirs.
        "CHUNKWISE_USER_MAX_QUEUED_PERCENT": "100",
        **getattr(request, "param", {}),
    }


@pytest.fixture
def temp_dir(app_config) -> Path:
    """Where uploads are spooled while a request is read."""
    return Path(app_config["CHUNKWISE_TEMP_DIR"])


@pytest.fixture
def archive_dir(app_config) -> Path:
    """Where admitted uploads are kept."""
    return Path(app_config["CHUNKWISE_ARCHIVE_DIR"])


class ClosingClient(FlaskClient):
    """A test client that reads each response whole and closes it, as a WSGI server does once
    it has sent one (the app removes upload spools then); buffered=False leaves it open."""

    def open(self, *args, buffered: bool = True, **kwargs):
        return super().open(*args, buffered=buffered, **kwargs)


@pytest.fixture
def app(app_config):
    """The coordinator app on a fresh database."""
    from app import create_app
    from app.runtime import close

    flask_app = create_app(app_config)
    flask_app.testing = True
    flask_app.test_client_class = ClosingClient
    yield flask_app
    close(flask_app.extensions["chunkwise.runtime"])


@pytest.fixture
def rt(app):
    """The services Runtime of the test app."""
    return app.extensions["chunkwise.runtime"]


@pytest.fixture
def client(app):
    """A Flask test client."""
    return app.test_client()


@pytest.fixture
def tokens(rt) -> dict:
    """Seeded credentials: user, operator, worker, and a second user `other`."""
    from services import credentials

    issued = {
        t.name: t.token
        for t in credentials.seed_local(
            rt.pool, user_token=None, operator_token=None, worker_token=None
        )
    }
    other = credentials.create_user(rt.pool, "other_user", "user").token
    return {
        "user": issued["compute_user"],
        "operator": issued["operator"],
        "worker": issued["local-worker"],
        "other": other,
    }


@pytest.fixture
def headers(tokens) -> dict:
    """Authorization headers by principal: user, operator, worker, other."""
    return {name: {"Authorization": f"Bearer {token}"} for name, token in tokens.items()}
