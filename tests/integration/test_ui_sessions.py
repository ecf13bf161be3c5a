"""Dashboard sessions live in the database: sign-out, expiry and revocation end them at once."""

from __future__ import annotations

import hashlib

import pytest

from app import create_app
from app.runtime import close
from services import maintenance
from tests.integration.dashboard_forms import csrf_of
from tests.integration.test_credentials import flask
from tests.integration.test_dashboard import submit_through_form

COOKIE = "chunkwise_ui"


def cookie_of(browser) -> str:
    """The dashboard cookie a test client holds, as a browser would send it."""
    return browser.get_cookie(COOKIE, path="/ui").value


def with_cookie(app, value: str):
    """A fresh test client sending this dashboard cookie."""
    browser = app.test_client()
    browser.set_cookie(COOKIE, value, path="/ui")
    return browser


def signed(app, held: dict) -> str:
    """A cookie value the app's own key signed, holding `held`."""
    return app.session_interface.get_signing_serializer(app).dumps(held)


def session_rows(db) -> list[dict]:
    """Every ui_sessions row."""
    return db.execute("SELECT * FROM ui_sessions ORDER BY created_at").fetchall()


def refused(browser, csrf: str) -> bool:
    """Whether every page and form post sends this browser to sign in."""
    answers = [
        browser.get("/ui/"),
        browser.get("/ui/jobs.json"),
        browser.get("/ui/submit"),
        submit_through_form_with(browser, csrf),
        browser.post("/ui/sign-out", data={"csrf_token": csrf}),
    ]
    return all(
        a.status_code == 302 and a.headers["Location"].startswith("/ui/sign-in?") for a in answers
    ) and all(a.status_code != 500 for a in answers)


def submit_through_form_with(browser, csrf: str):
    """POST the submit form with a known CSRF token (the page itself is refused)."""
    return browser.post(
        "/ui/submit",
        data={"csrf_token": csrf, "column": "value", "chunks": "2"},
        content_type="multipart/form-data",
    )


def test_a_cookie_copied_before_sign_out_opens_nothing_after_it(app, sign_in, db):
    browser = sign_in("user")
    csrf = csrf_of(browser.get("/ui/"))
    copied = cookie_of(browser)

    signed_out = browser.post("/ui/sign-out", data={"csrf_token": csrf})

    assert signed_out.status_code == 303
    assert session_rows(db) == []
    assert refused(with_cookie(app, copied), csrf)
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


def test_signing_out_in_one_app_ends_the_session_in_another_on_the_same_database(
    app, app_config, sign_in
):
    browser = sign_in("user")
    second = create_app(app_config)
    try:
        elsewhere = with_cookie(second, cookie_of(browser))
        assert elsewhere.get("/ui/").status_code == 200

        browser.post("/ui/sign-out", data={"csrf_token": csrf_of(browser.get("/ui/"))})

        assert elsewhere.get("/ui/").status_code == 302
    finally:
        close(second.extensions["chunkwise.runtime"])


def test_the_database_keeps_only_the_digest_of_the_session_id(app, sign_in, db, tokens):
    browser = sign_in("user")
    held = app.session_interface.get_signing_serializer(app).loads(cookie_of(browser))

    [row] = session_rows(db)

    assert len(held["sid"]) * 6 >= 128
    assert row["id_sha256"] == hashlib.sha256(held["sid"].encode()).hexdigest()
    assert held["sid"] not in str(row)
    assert (row["expires_at"] - row["created_at"]).total_seconds() == 12 * 3600


@pytest.mark.parametrize(
    "held",
    [
        {"sid": "A" * 10_000},
        {"sid": "A" * 42 + "!"},
        {"sid": 12345},
        {"sid": ["A" * 43]},
        {"sid": None},
        {"sid": "A" * 43},  # well formed, but no session has this id
        {"token_sha256": "0" * 64},  # a cookie from before sessions lived in the database
    ],
    ids=["over-long", "malformed", "a number", "a list", "null", "unknown", "old-style"],
)
def test_a_signed_cookie_naming_no_live_session_is_sent_to_sign_in_and_writes_nothing(
    app, sign_in, db, held
):
    live = sign_in("user")
    csrf = csrf_of(live.get("/ui/"))
    before = session_rows(db)

    assert refused(with_cookie(app, signed(app, {**held, "csrf": csrf, "_permanent": True})), csrf)
    assert session_rows(db) == before
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


@pytest.mark.parametrize("value", ["x" * 8_000, "", "not.a.signature", "\u00e9" * 100])
def test_an_unsigned_or_over_long_cookie_is_sent_to_sign_in(app, db, value):
    assert refused(with_cookie(app, value), "any")
    assert session_rows(db) == []


def test_an_expired_session_is_refused_and_maintenance_deletes_it(app, rt, sign_in, db):
    expired = sign_in("user")
    db.execute("UPDATE ui_sessions SET expires_at = now() - interval '1 second'")
    fresh = sign_in("other")

    assert expired.get("/ui/").status_code == 302
    assert fresh.get("/ui/").status_code == 200
    maintenance.run_pass(rt)

    assert len(session_rows(db)) == 1
    assert fresh.get("/ui/").status_code == 200


def test_revoking_a_token_ends_its_sessions_and_no_one_elses(app, sign_in, db, tokens):
    first, second, other = sign_in("user"), sign_in("user"), sign_in("other")
    token_id = db.execute(
        "SELECT id FROM api_tokens WHERE token_sha256 = %s",
        [hashlib.sha256(tokens["user"].encode()).hexdigest()],
    ).fetchone()["id"]

    assert flask(app, "revoke-token", str(token_id)).exit_code == 0

    assert first.get("/ui/").status_code == 302
    assert second.get("/ui/").status_code == 302
    assert other.get("/ui/").status_code == 200
    assert {r["token_id"] for r in session_rows(db)} == {
        db.execute(
            "SELECT id FROM api_tokens WHERE token_sha256 = %s",
            [hashlib.sha256(tokens["other"].encode()).hexdigest()],
        ).fetchone()["id"]
    }


def test_a_refused_sign_in_writes_no_session(client, tokens, db):
    for token in [tokens["worker"], "cwu_unknown", "", "x" * 5_000]:
        form = client.get("/ui/sign-in")
        answer = client.post("/ui/sign-in", data={"csrf_token": csrf_of(form), "token": token})
        assert answer.status_code in (401, 403), token[:10]

    assert session_rows(db) == []


def test_an_operator_demoted_while_signed_in_loses_the_operator_pages_at_once(sign_in, db):
    browser = sign_in("operator")
    assert browser.get("/ui/queue").status_code == 200

    db.execute("UPDATE users SET role = 'user' WHERE name = 'operator'")

    assert browser.get("/ui/queue").status_code == 403


def test_a_form_post_from_the_sign_in_page_still_signs_in(client, tokens):
    # The sign-in form's CSRF token lives in the cookie before any session exists.
    form = client.get("/ui/sign-in")

    answer = client.post("/ui/sign-in", data={"csrf_token": csrf_of(form), "token": tokens["user"]})

    assert answer.status_code == 303
    assert client.get("/ui/").status_code == 200
    assert submit_through_form(client).status_code == 303
