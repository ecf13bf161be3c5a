"""The input rules every request shares, enforced once at the edge: text PostgreSQL can store,
integers that fit their column, strict booleans, each parameter once, and a JSON body read
within its size and depth."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from itertools import accumulate

from flask import request
from marshmallow import Schema, ValidationError, fields, pre_load, validate
from werkzeug.datastructures import MultiDict
from werkzeug.exceptions import BadRequest, RequestEntityTooLarge, UnsupportedMediaType

# Room for a batch of MAX_BATCH_RESULTS results with their summaries, several times over.
MAX_JSON_BYTES = 4 * 1024 * 1024
MAX_JSON_DEPTH = 32
# The PostgreSQL column types (sql/0001.queue.sql) an integer field may be stored in.
COLUMN_RANGES = {
    "smallint": (-(2**15), 2**15 - 1),
    "integer": (-(2**31), 2**31 - 1),
    "bigint": (-(2**63), 2**63 - 1),
}
# json.loads pairs \ud83d\ude00 into one code point, so any surrogate left is unpaired; text
# columns refuse NUL, and UTF-8 cannot encode a lone surrogate.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# A JSON string, or an unterminated one running to the end: every quote starts a match that
# succeeds, so scanning stays linear (a pattern that could fail would rescan from each quote).
_JSON_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+\\?(?:"|\Z)', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def text_problem(value: str) -> str | None:
    """Why PostgreSQL could not store this string, or None when it can."""
    found = _UNSTORABLE.search(value)
    if found is None:
        return None
    if found.group() == "\x00":
        return "must not contain NUL (\\u0000)"
    return "must not contain an unpaired surrogate"


def unstorable_text(value: object) -> dict | list | None:
    """Marshmallow-shaped errors for each string, key or value, PostgreSQL could not store."""
    if isinstance(value, str):
        problem = text_problem(value)
        return [problem] if problem else None
    if isinstance(value, dict):
        errors: dict = {}
        for key, item in value.items():
            if isinstance(key, str) and (problem := text_problem(key)):
                # Named as JSON spells it: the raw key would carry the bad character back.
                errors[json.dumps(key)[1:-1]] = [f"a key {problem}"]
            elif (found := unstorable_text(item)) is not None:
                errors[key] = found
        return errors or None
    if isinstance(value, list | tuple):
        errors = {i: found for i, item in enumerate(value) if (found := unstorable_text(item))}
        return errors or None
    return None


class RequestSchema(Schema):
    """Base of every request schema: nothing PostgreSQL cannot store, at any depth."""

    @pre_load
    def _refuse_unstorable_text(self, data: object, **kwargs) -> object:
        # One walk over the raw input covers named fields, unknown ones and free-form JSON
        # (parameters, labels, details, checkpoint) alike, from bodies, forms and queries.
        errors = unstorable_text(data)
        if errors:
            raise ValidationError(errors)
        return data


class Int(fields.Integer):
    """An integer that fits its PostgreSQL column (integer unless told), within any bounds."""

    def __init__(
        self,
        *,
        minimum: int | None = None,
        maximum: int | None = None,
        column: str = "integer",
        **kwargs,
    ):
        low, high = COLUMN_RANGES[column]
        low = low if minimum is None else max(low, minimum)
        high = high if maximum is None else min(high, maximum)
        super().__init__(validate=validate.Range(min=low, max=high), **kwargs)

    def _deserialize(self, value, attr, data, **kwargs):
        # 1.5 must not quietly become 1. Text stays accepted: queries and forms carry "7".
        if isinstance(value, float) and not value.is_integer():
            raise self.make_error("invalid")
        return super()._deserialize(value, attr, data, **kwargs)


class Bool(fields.Boolean):
    """true or false, and nothing else a JSON body could hold ("yes", 1, "false")."""

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, bool):
            raise self.make_error("invalid")
        return value


def check_header(name: str, max_length: int | None = None) -> str | None:
    """A request header's value, refused with 422 when it could not be stored."""
    return checked_text(name, request.headers.get(name), max_length)


def checked_text(name: str, value: str | None, max_length: int | None = None) -> str | None:
    """A header's or form field's value, refused with 422 naming it when it could not be stored."""
    if value is None:
        return None
    problem = text_problem(value)
    if problem is None and max_length is not None and not 1 <= len(value) <= max_length:
        problem = f"must be 1 to {max_length} characters"
    if problem:
        raise ValidationError({name: [problem]})
    return value


IDEMPOTENCY_KEY_MAX = 200
# One range with a first byte: what a worker resuming a cut read sends (bytes=N- or bytes=N-M).
_BYTE_RANGE = re.compile(r"bytes=(\d{1,18})-(\d{0,18})")


def byte_range() -> tuple[int, int | None] | None:
    """The request's Range header as (first, last or None), refused with 422 naming it."""
    value = request.headers.get("Range")
    if value is None:
        return None
    match = _BYTE_RANGE.fullmatch(value.strip())
    if match is None or (match[2] and int(match[2]) < int(match[1])):
        raise ValidationError(
            {"Range": ["must be one range with a first byte: bytes=FIRST- or bytes=FIRST-LAST"]}
        )
    return int(match[1]), int(match[2]) if match[2] else None


GIVEN_TWICE = "give this parameter once"


def single_values(values: MultiDict, lists: tuple[str, ...] = ()) -> dict:
    """A query's or form's fields as a dict, each of `lists` as a list; any other field given
    more than once is refused, since which of its values counts would be a guess."""
    repeated = {
        name: [GIVEN_TWICE]
        for name in values
        if name not in lists and len(values.getlist(name)) > 1
    }
    if repeated:
        raise ValidationError(repeated)
    return {**values.to_dict(), **{name: values.getlist(name) for name in lists}}


def load_json(schema: Schema, plain: Callable[[dict], dict | None] | None = None) -> dict:
    """Parse the request's JSON object with a schema (400 when it is not JSON within limits);
    `plain` may load the commonest bodies faster, answering None for the schema to load."""
    body = decode_json_body()
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    loaded = plain(body) if plain is not None else None
    return loaded if loaded is not None else schema.load(body)


def decode_json_body() -> object:
    """The request's JSON value: UTF-8, at most MAX_JSON_BYTES and MAX_JSON_DEPTH deep."""
    if not request.is_json:
        raise UnsupportedMediaType("the request body must be JSON (Content-Type: application/json)")
    try:
        text = _read_body(MAX_JSON_BYTES).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest("the request body must be UTF-8") from exc
    # Measured before decoding: json.loads recurses once per level, so a deep body would
    # otherwise end in RecursionError rather than a clear refusal.
    # Counting brackets first spares the scan to the bodies that could nest that deep at all.
    opened = text.count("[") + text.count("{")
    if opened > MAX_JSON_DEPTH and json_depth(text) > MAX_JSON_DEPTH:
        raise BadRequest(f"the JSON body nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except ValueError as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc}") from exc


def json_depth(text: str) -> int:
    """How deeply arrays and objects nest in a JSON text (brackets inside strings ignored)."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0)


def _read_body(limit: int) -> bytes:
    if request.content_length is not None and request.content_length > limit:
        raise RequestEntityTooLarge(f"a JSON body may be at most {limit} bytes")
    # A chunked body states no length: read one byte past the limit to know it is over.
    blocks, size = [], 0
    while size <= limit:
        block = request.stream.read(limit + 1 - size)
        if not block:
            break
        blocks.append(block)
        size += len(block)
    if size > limit:
        raise RequestEntityTooLarge(f"a JSON body may be at most {limit} bytes")
    return b"".join(blocks)


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is too large for a JSON number here")
    return value
