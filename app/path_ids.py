"""Ids in URL paths: one that is not a UUID is a 422 naming its parameter, not a bare 404."""

from __future__ import annotations

import re
from uuid import UUID

from flask import Flask
from marshmallow import ValidationError
from werkzeug.routing import BaseConverter, UUIDConverter

_CANONICAL = re.compile(UUIDConverter.regex)


class MalformedId(str):
    """A path segment where a UUID belongs."""


class PathIdConverter(BaseConverter):
    """`<uuid:name>` matching any one segment: a UUID, or a MalformedId to refuse by name."""

    def to_python(self, value: str) -> UUID | MalformedId:
        return UUID(value) if _CANONICAL.fullmatch(value) else MalformedId(value)

    def to_url(self, value: UUID) -> str:
        return str(value)


def init_app(app: Flask) -> None:
    """Take over `<uuid:...>` (call before registering blueprints) and refuse malformed ids."""
    app.url_map.converters["uuid"] = PathIdConverter

    @app.url_value_preprocessor
    def refuse_malformed_ids(endpoint: str | None, values: dict | None) -> None:
        bad = {k: ["must be a UUID"] for k, v in (values or {}).items() if type(v) is MalformedId}
        if bad:
            raise ValidationError(bad)
