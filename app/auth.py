"""Bearer-token authentication; each blueprint says which principals may call it."""

from __future__ import annotations

from flask import g, request

from app.runtime import get_runtime
from services import auth, logcontext
from services.auth import Principal
from services.errors import Forbidden


def current_principal() -> Principal:
    """The authenticated caller of this request."""
    return g.principal


def any_token() -> None:
    """before_request: any valid token (the OpenAPI document)."""
    _authenticate()


def users_only() -> None:
    """before_request: user and operator tokens (jobs, chunks, events)."""
    if _authenticate().kind == "worker":
        raise Forbidden("worker tokens may call only /api/v1/tasks/...")


def workers_only() -> None:
    """before_request: worker tokens (the task protocol)."""
    if _authenticate().kind != "worker":
        raise Forbidden("the task endpoints are for worker tokens")


def operators_only() -> None:
    """before_request: operator tokens (the queue and the workers)."""
    principal = _authenticate()
    if principal.kind == "worker":
        raise Forbidden("worker tokens may call only /api/v1/tasks/...")
    if not principal.is_operator:
        raise Forbidden("this view is for operators")


def _authenticate() -> Principal:
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    # The scheme is case-insensitive (RFC 9110 11.1): "bearer" is as good as "Bearer".
    token = credentials.strip() if scheme.lower() == "bearer" else None
    rt = get_runtime()
    principal = auth.authenticate(rt.pool, token, rt.principals)
    g.principal = principal
    logcontext.bind(principal=principal.name)
    return principal
