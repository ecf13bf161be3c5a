"""The input rules hold for every request schema, not only for the ones a test happens to try."""

from __future__ import annotations

import time

import pytest
from marshmallow import Schema, ValidationError, fields

from app import input_rules, openapi
from app.schemas import jobs as job_schemas
from app.schemas import tasks as task_schemas


def all_fields(field: fields.Field):
    """The field and every field inside it (list items, dict values)."""
    yield field
    for inner in (getattr(field, "inner", None), getattr(field, "value_field", None)):
        if inner is not None:
            yield from all_fields(inner)


def request_schemas() -> list[type[Schema]]:
    """Every schema the API loads requests with: the OpenAPI table's and those they nest."""
    found: set[type[Schema]] = set()
    todo = [request for request, _, _ in openapi.DOCUMENTED.values() if request is not None]
    while todo:
        schema = todo.pop()
        if schema in found:
            continue
        found.add(schema)
        for field in schema().fields.values():
            for part in all_fields(field):
                if isinstance(part, fields.Nested):
                    todo.append(type(part.schema))
    return sorted(found, key=lambda cls: cls.__name__)


def test_the_request_schemas_include_the_nested_ones():
    names = {schema.__name__ for schema in request_schemas()}

    assert {"TaskSpecSchema", "ResultItemSchema", "JobCreateSchema"} <= names


def root_request_schemas() -> list[type[Schema]]:
    """The schemas requests are loaded with, as the OpenAPI table names them."""
    roots = {request for request, _, _ in openapi.DOCUMENTED.values() if request is not None}
    return sorted(roots, key=lambda cls: cls.__name__)


@pytest.mark.parametrize("schema", root_request_schemas(), ids=lambda cls: cls.__name__)
def test_every_request_schema_refuses_text_postgresql_cannot_store(schema):
    # Its walk covers the raw body at every depth, nested schemas' fields included.
    assert issubclass(schema, input_rules.RequestSchema)


@pytest.mark.parametrize(
    ("schema", "body", "path"),
    [
        (
            job_schemas.JobCreateSchema,
            {
                "workload": "echo",
                "input_uri": "s3://in",
                "tasks": [{"input_uri": "s3://in/\x00", "input_sha256": "a" * 64}],
            },
            ("tasks", 0, "input_uri"),
        ),
        (
            task_schemas.ResultBatchSchema,
            {
                "worker_id": "w",
                "results": [{"task_id": "0" * 32, "attempt": 1, "metrics": {"note": "\ud800"}}],
            },
            ("results", 0, "metrics", "note"),
        ),
    ],
    ids=["task of a job", "result of a batch"],
)
def test_text_inside_a_nested_item_is_refused_by_its_request_naming_the_path(schema, body, path):
    with pytest.raises(ValidationError) as refused:
        schema().load(body)

    errors = refused.value.messages
    for key in path:
        errors = errors[key]
    assert errors and "must not contain" in errors[0]


@pytest.mark.parametrize("schema", request_schemas(), ids=lambda cls: cls.__name__)
def test_every_integer_of_a_request_is_bounded_by_its_column(schema):
    for name, field in schema().fields.items():
        for part in all_fields(field):
            if isinstance(part, fields.Integer):
                assert isinstance(part, input_rules.Int), f"{schema.__name__}.{name}"


@pytest.mark.parametrize(
    ("column", "low", "high"),
    [("smallint", -(2**15), 2**15 - 1), ("integer", -(2**31), 2**31 - 1)],
)
def test_an_int_field_refuses_one_past_its_column(column, low, high):
    class Probe(input_rules.RequestSchema):
        n = input_rules.Int(column=column)

    assert Probe().load({"n": high}) == {"n": high}
    assert Probe().load({"n": low}) == {"n": low}
    for outside in (high + 1, low - 1):
        assert "n" in Probe().validate({"n": outside})


def test_an_int_field_keeps_the_narrower_of_its_own_bounds_and_its_column():
    field = input_rules.Int(minimum=-(2**40), maximum=5)

    [bound] = field.validators
    assert (bound.min, bound.max) == (-(2**31), 5)


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("1", 0),
        ("{}", 1),
        ('{"a": [1, {"b": []}]}', 4),
        ('["[[[[", "]]]", "\\"[{"]', 1),
        ("[" * 50 + "]" * 50, 50),
        ('{"a": "\\\\"}', 1),
        ('["unterminated \\', 1),
        ('[[{"a": "x\\"]"}]]', 3),
    ],
)
def test_json_depth_counts_nesting_outside_strings(text, depth):
    assert input_rules.json_depth(text) == depth


@pytest.mark.parametrize(
    ("value", "errors"),
    [
        ({"a": ["ok", "b\x00"]}, {"a": {1: ["must not contain NUL (\\u0000)"]}}),
        ({"k\ud800": 1}, {"k\\ud800": ["a key must not contain an unpaired surrogate"]}),
        ({"a": {"b": "\udfff"}}, {"a": {"b": ["must not contain an unpaired surrogate"]}}),
        ({"a": "\U0001f600", "n": 1, "f": 1.5, "z": None}, None),
    ],
)
def test_unstorable_text_names_each_place_in_marshmallows_shape(value, errors):
    assert input_rules.unstorable_text(value) == errors


def test_json_depth_stays_linear_on_strings_that_never_close():
    # Each escaped quote could restart a failing string match: quadratic, minutes for 4 MiB.
    text = '"' + '\\"' * (input_rules.MAX_JSON_BYTES // 2)

    started = time.perf_counter()
    assert input_rules.json_depth(text) == 0
    assert time.perf_counter() - started < 2
