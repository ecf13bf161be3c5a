"""Liveness and readiness answers."""

from __future__ import annotations

from marshmallow import fields

from app.schemas.base import ResponseSchema


class HealthSchema(ResponseSchema):
    """Liveness and readiness."""

    status = fields.Str()
    missing_migrations = fields.List(fields.Str())
