"""Bearer-token authentication and the rule of which principal may call which route."""

from __future__ import annotations

from flask import Flask, g, request

from app.runtime import get_runtime
from services import auth, logcontext
from services.auth import Principal
from services.errors import Forbidden

API_PREFIX = "/api/v1/"
WORKER_PREFIX = "/api/v1/tasks/"
OPERATOR_ONLY = ("/api/v1/queue", "/api/v1/workers")


def current_principal() -> Principal:
    """The authenticated caller of this request."""
    return g.principal


def init_app(app: Flask) -> None:
    """Authenticate every /api/v1 request before its view runs."""

    @app.before_request
    def authenticate() -> None:
        if not request.path.startswith(API_PREFIX):
            return
        header = request.headers.get("Authorization", "")
        token = header[len("Bearer ") :].strip() if header.startswith("Bearer ") else None
        principal = auth.authenticate(get_runtime().pool, token)
        is_task_route = request.path.startswith(WORKER_PREFIX)
        if (
            principal.kind == "worker"
            and not is_task_route
            and request.path != "/api/v1/openapi.json"
        ):
            raise Forbidden("worker tokens may call only /api/v1/tasks/...")
        if principal.kind == "user" and is_task_route:
            raise Forbidden("the task endpoints are for worker tokens")
        if request.path.startswith(OPERATOR_ONLY) and not principal.is_operator:
            raise Forbidden("this view is for operators")
        g.principal = principal
        logcontext.bind(principal=principal.name)
