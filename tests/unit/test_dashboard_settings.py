"""The dashboard's session key (CHUNKWISE_SECRET_KEY, else one shared key file) and cookie."""

from __future__ import annotations

import stat

import pytest
from flask import Flask, session

from app.config import ConfigError, load_settings
from app.ui_session import (
    COOKIE_NAME,
    COOKIE_PATH,
    SECRET_KEY_FILE,
    DashboardSessionInterface,
    shared_secret_key,
)

URL = "postgresql://postgres@127.0.0.1:5432/chunkwise"


def test_every_process_reading_the_same_key_file_gets_the_same_key(tmp_path):
    path = tmp_path / "run" / SECRET_KEY_FILE

    first, second = shared_secret_key(path), shared_secret_key(path)

    assert first == second and len(first) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == [SECRET_KEY_FILE]


def test_another_key_file_holds_another_key(tmp_path):
    assert shared_secret_key(tmp_path / "a" / "key") != shared_secret_key(tmp_path / "b" / "key")


def test_a_key_file_that_cannot_be_written_names_the_setting_to_use(tmp_path):
    (tmp_path / "not-a-directory").write_text("")

    with pytest.raises(RuntimeError, match="set CHUNKWISE_SECRET_KEY"):
        shared_secret_key(tmp_path / "not-a-directory" / SECRET_KEY_FILE)


def test_a_given_secret_key_is_used_as_is():
    key = "k" * 40

    assert load_settings({"DATABASE_URL": URL, "CHUNKWISE_SECRET_KEY": key}).secret_key == key
    assert load_settings({"DATABASE_URL": URL}).secret_key is None


def test_a_short_secret_key_stops_the_coordinator_without_echoing_it():
    with pytest.raises(ConfigError) as error:
        load_settings({"DATABASE_URL": URL, "CHUNKWISE_SECRET_KEY": "hunter2"})

    assert "CHUNKWISE_SECRET_KEY must be at least 32 characters" in str(error.value)
    assert "hunter2" not in str(error.value)


def test_the_secret_key_never_shows_in_the_settings_repr():
    key = "s" * 40

    assert key not in repr(load_settings({"DATABASE_URL": URL, "CHUNKWISE_SECRET_KEY": key}))


@pytest.mark.parametrize(
    ("path", "opened"),
    [("/ui", True), ("/ui/jobs", True), ("/api/v1/tasks/results", False), ("/uix", False)],
)
def test_the_dashboard_session_is_read_only_under_the_cookie_path(path, opened):
    app = Flask(__name__)
    app.secret_key = "k" * 40
    app.session_interface = DashboardSessionInterface()
    app.config.update(SESSION_COOKIE_NAME=COOKIE_NAME, SESSION_COOKIE_PATH=COOKIE_PATH)
    app.add_url_rule(path, "seen", lambda: {"who": session.get("who")})
    client = app.test_client()
    # Set for every path, as no browser would: only the dashboard's pages may read it.
    cookie = app.session_interface.get_signing_serializer(app).dumps({"who": "ada"})
    client.set_cookie(COOKIE_NAME, cookie, path="/")

    assert client.get(path).json == {"who": "ada" if opened else None}
