"""Custom marshmallow fields, and field rules and OpenAPI metadata several schema modules share."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from marshmallow import ValidationError, fields, missing, validate

from services.task_values import JsonValue


def whole_text(pattern: str, error: str) -> dict:
    r"""A string field's rule that `pattern` match the whole text: to its end in Python ("\Z":
    "$" lets a trailing newline through), and in the OpenAPI document as ECMA-262 says it, whose
    "$" is the end of the text and "\Z" a literal Z."""
    return {
        "validate": validate.Regexp(pattern + r"\Z", error=error),
        "metadata": {"pattern": pattern + "$"},
    }


HEX64 = whole_text(r"^[0-9a-f]{64}", "must be 64 lowercase hex digits")

# One line, with a key of more than spaces.
LABEL_TEXT = whole_text(r"^(?=\s*[^=\s])[^=\r\n]{1,64}=[^\r\n]{0,256}", "must be key=value")


class LabelText(fields.Str):
    """A label as `key=value` text, loaded as a (key, value) pair; spaces around either go,
    so `team = a` is the label the JSON `{"team": "a"}` gives."""

    def __init__(self, **kwargs):
        super().__init__(**LABEL_TEXT, **kwargs)

    def deserialize(self, value, attr=None, data=None, **kwargs) -> tuple[str, str] | None:
        # After the field's own validation, which checks the text as it was sent.
        text = super().deserialize(value, attr, data, **kwargs)
        if text is None:
            return None
        key, value = text.split("=", 1)
        return key.strip(), value.strip()


class LabelPairs(fields.List):
    """Repeated `key=value` texts (a CSV job's query or form), loaded as a dict of labels."""

    def __init__(self, **kwargs):
        super().__init__(LabelText(), load_default=dict, **kwargs)

    def _deserialize(self, value, attr, data, **kwargs) -> dict[str, str]:
        pairs = super()._deserialize(value, attr, data, **kwargs)
        labels: dict[str, str] = {}
        twice: dict[int, list[str]] = {}
        for index, (key, text) in enumerate(pairs):
            if key in labels:
                # Named by its place in the list, as the rules of each item name theirs.
                twice[index] = [f"the key {key!r} is given twice"]
            labels.setdefault(key, text)
        if twice:
            raise ValidationError(twice)
        return labels


# A schedule further off, ahead or behind, is more likely a mistake (a year typed wrong)
# than a plan.
MAX_SCHEDULE_DISTANCE = timedelta(days=366)


def _within_a_year(value: datetime) -> None:
    if abs(value - datetime.now(UTC)) > MAX_SCHEDULE_DISTANCE:
        raise ValidationError("must be within a year of now")


class Schedule(fields.AwareDateTime):
    """When a job may start (ISO 8601 with an offset): no task of it is claimed before."""

    def __init__(self, **kwargs):
        super().__init__(
            load_default=None,
            validate=_within_a_year,
            metadata={"description": "schedule the job: no task is claimed before this time"},
            **kwargs,
        )


class Json(fields.Raw):
    """Any JSON value, loaded as a JsonValue so that null stays apart from absent."""

    def deserialize(self, value, attr=None, data=None, **kwargs):
        if value is None:
            return JsonValue(None)
        loaded = super().deserialize(value, attr, data, **kwargs)
        return loaded if loaded is missing else JsonValue(loaded)


# What the OpenAPI document says of a field holding JSON: OpenAPI 3.0 has no "any" type.
JSON_OBJECT_OR_ARRAY = {"oneOf": [{"type": "object"}, {"type": "array", "items": {}}]}
ANY_JSON = {
    "anyOf": [
        *JSON_OBJECT_OR_ARRAY["oneOf"],
        {"type": "string"},
        {"type": "number"},
        {"type": "boolean"},
    ],
    "nullable": True,
}

# What the OpenAPI document says of a Method field, which apispec cannot infer.
NULLABLE_STRING = {"type": "string", "nullable": True}
NULLABLE_INTEGER = {"type": "integer", "nullable": True}
NULLABLE_OBJECT = {"type": "object", "nullable": True}
NULLABLE_DATETIME = {"type": "string", "format": "date-time", "nullable": True}
