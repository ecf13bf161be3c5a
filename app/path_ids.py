"""Ids and names in URL paths: one that is malformed is a 422 naming its parameter, not a
bare 404."""

from __future__ import annotations

import re
from uuid import UUID

from flask import Flask
from marshmallow import ValidationError
from werkzeug.routing import BaseConverter, UUIDConverter

from services import schedules

_CANONICAL = re.compile(UUIDConverter.regex)
_SCHEDULE_NAME = re.compile(schedules.NAME_PATTERN.strip("^$"))


class Malformed(str):
    """A path segment its parameter does not take, and what it should have been."""

    def __new__(cls, value: str, problem: str) -> Malformed:
        segment = super().__new__(cls, value)
        segment.problem = problem
        return segment


class PathIdConverter(BaseConverter):
    """`<uuid:name>` matching any one segment: a UUID, or a Malformed one to refuse by name."""

    def to_python(self, value: str) -> UUID | Malformed:
        return UUID(value) if _CANONICAL.fullmatch(value) else Malformed(value, "must be a UUID")

    def to_url(self, value: UUID) -> str:
        return str(value)


class ScheduleNameConverter(BaseConverter):
    """`<schedule_name:name>` matching any one segment: a schedule's name, or a Malformed one."""

    def to_python(self, value: str) -> str:
        if _SCHEDULE_NAME.fullmatch(value):
            return value
        return Malformed(value, schedules.NAME_RULE)


def init_app(app: Flask) -> None:
    """Take over `<uuid:...>`, add `<schedule_name:...>` (call before registering blueprints)
    and refuse malformed segments."""
    app.url_map.converters["uuid"] = PathIdConverter
    app.url_map.converters["schedule_name"] = ScheduleNameConverter

    @app.url_value_preprocessor
    def refuse_malformed_segments(endpoint: str | None, values: dict | None) -> None:
        bad = {k: [v.problem] for k, v in (values or {}).items() if type(v) is Malformed}
        if bad:
            raise ValidationError(bad)
