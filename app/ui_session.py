"""The dashboard's signed session cookie: its key, its flags, the session it names, CSRF tokens."""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path

from flask import Flask, Request, request, session
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface

from app.config import Settings
from services import ui_sessions
from services.auth import Principal
from services.errors import Forbidden
from services.runtime import Runtime

COOKIE_NAME = "chunkwise_ui"
COOKIE_PATH = "/ui"
# The cookie's signature carries its time; Flask refuses one older than this on every request,
# as the database refuses the session itself.
SESSION_LIFETIME = ui_sessions.LIFETIME
SECRET_KEY_FILE = "dashboard-secret-key"


class DashboardSessionInterface(SecureCookieSessionInterface):
    """Flask's signed cookie, marked Secure whenever the request came over https.

    Browsers drop a Secure cookie set over plain http, so on http://localhost (make run, the
    tests) the cookie goes without it; behind TLS, gunicorn reports https (X-Forwarded-Proto
    from forwarded_allow_ips) and the flag is set.
    """

    def get_cookie_secure(self, app: Flask) -> bool:
        """Secure when this request arrived over https."""
        return request.is_secure or bool(app.config["SESSION_COOKIE_SECURE"])

    def open_session(self, app: Flask, request: Request) -> SecureCookieSession | None:
        """The dashboard's session; none (Flask's null session) outside its pages.

        A browser sends the cookie only under its path, so an API call never carries it:
        reading it there was 1% of a no-op task's coordinator CPU, for an empty session.
        """
        path, under = request.path, self.get_cookie_path(app)
        if path != under and not path.startswith(under.rstrip("/") + "/"):
            return None
        return super().open_session(app, request)


def init_app(app: Flask, settings: Settings) -> None:
    """Give the app its session key and the dashboard's cookie flags."""
    app.secret_key = settings.secret_key or shared_secret_key(
        settings.archive_dir.parent / SECRET_KEY_FILE
    )
    app.session_interface = DashboardSessionInterface()
    app.config.update(
        SESSION_COOKIE_NAME=COOKIE_NAME,
        SESSION_COOKIE_PATH=COOKIE_PATH,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        PERMANENT_SESSION_LIFETIME=SESSION_LIFETIME,
        # The lifetime counts from sign-in, not from the last page seen.
        SESSION_REFRESH_EACH_REQUEST=False,
    )


def shared_secret_key(path: Path) -> str:
    """The key in this file, which the first coordinator process to need it writes.

    Each gunicorn process builds its own app, so a key drawn per process would make a cookie
    signed by one worker look forged to the next. The file sits beside the archive directory
    (the run directory locally, /var/lib/chunkwise in the image), which every coordinator
    process of a host already shares.
    """
    try:
        if not path.exists():
            _write_new_key(path)
        return path.read_text().strip()
    except OSError as exc:
        raise RuntimeError(
            f"cannot keep the dashboard's session key in {path} ({exc.strerror}): "
            "set CHUNKWISE_SECRET_KEY"
        ) from exc


def _write_new_key(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(48))
    try:
        # link() never replaces: when processes race, the first complete file wins.
        os.link(draft, path)
    except FileExistsError:
        pass
    finally:
        draft.unlink()


def sign_in(rt: Runtime, token: str) -> Principal:
    """Check a typed user token and start a fresh session, which the cookie names by its id.

    The cookie is signed, not encrypted: it holds the session's random id and its CSRF
    token, never the token or its digest. The session itself lives in the database
    (services.ui_sessions), so signing out ends it everywhere at once.
    """
    session_id, principal = ui_sessions.start_session(rt.pool, token.strip())
    # A new session, never the one from before sign-in (session fixation).
    session.clear()
    session.permanent = True
    session["sid"] = session_id
    session["csrf"] = secrets.token_urlsafe(32)
    return principal


def sign_out(rt: Runtime) -> None:
    """End the session in the database, then forget the cookie."""
    ui_sessions.end_session(rt.pool, session.get("sid"))
    session.clear()


def signed_in_principal(rt: Runtime) -> Principal | None:
    """The user of this session, asked of the database on every request: a session signed
    out, expired, or signed in with a since revoked token opens nothing."""
    if "sid" not in session:
        return None
    principal = ui_sessions.session_principal(rt.pool, session["sid"])
    if principal is None:
        session.clear()
    return principal


def csrf_token() -> str:
    """This session's CSRF token, made on first use (the sign-in form needs one too)."""
    if "csrf" not in session:
        session["csrf"] = secrets.token_urlsafe(32)
    return session["csrf"]


def check_csrf(submitted: str | None) -> None:
    """Refuse a form post that does not carry this session's CSRF token."""
    # As bytes: compare_digest refuses a str holding anything beyond ASCII.
    expected = session.get("csrf", "").encode()
    given = (submitted or "").encode("utf-8", "surrogatepass")
    if not expected or not given or not hmac.compare_digest(expected, given):
        raise Forbidden("the form's CSRF token is missing or stale; reload the page")
