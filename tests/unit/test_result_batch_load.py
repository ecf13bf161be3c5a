"""A batch of plain manifests loads without marshmallow exactly as ResultBatchSchema loads it;
any other body is left to the schema."""

from __future__ import annotations

import copy
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from marshmallow import ValidationError

from app.schemas.tasks import ResultBatchSchema, plain_result_batch

SCHEMA = ResultBatchSchema()
REFUSED = object()

HEX = "0123456789abcdef"
tokens = st.text(HEX, min_size=64, max_size=64).map(lambda h: f"cwl_{h}")
digests = st.text(HEX, min_size=64, max_size=64)
worker_ids = st.text(st.characters(categories=("L", "N", "Pd")), min_size=1, max_size=200)
task_ids = st.uuids().map(str)
peaks = st.integers(min_value=0, max_value=2**63 - 1)


def manifests():
    """A plain manifest as a worker sends it, some optional fields left out."""
    required = {"task_id": task_ids, "attempt": st.integers(1, 2**31 - 1), "lease_token": tokens}
    optional = {
        "result_uri": st.text(min_size=1, max_size=2000).filter(lambda t: "\x00" not in t),
        "result_sha256": digests,
        "metrics": st.fixed_dictionaries({}, optional={"peak_rss_bytes": peaks, "rows": peaks}),
    }
    return st.fixed_dictionaries(required, optional=optional)


def batches(max_items: int | None = None):
    """A batch of plain manifests, with or without the workloads of ?claim=N."""
    items = st.lists(manifests(), min_size=1, max_size=max_items)
    return st.fixed_dictionaries(
        {"worker_id": worker_ids, "results": items},
        optional={"workloads": st.lists(worker_ids, min_size=1, max_size=20)},
    )


# Values any field may be given instead of its own: wrong types, bounds, formats and text.
odd_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=False),
    st.text(max_size=70),
    st.just("\x00"),
    st.just("\ud800"),
    st.just(" "),
    st.just("cwl_" + "A" * 64),
    st.just("cwl_" + "a" * 64 + "\n"),
    st.just("a" * 64 + "\n"),
    st.just("x" * 2001),
    st.just(str(uuid.uuid4()).upper()),
    st.just("{" + str(uuid.uuid4()) + "}"),
    st.just(1.0),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.just({"peak_rss_bytes": -1}),
    st.just({"peak_rss_bytes": 1.5}),
    st.just({"summary": None}),
)


@st.composite
def altered(draw, body_strategy):
    """A batch with one field, of the batch or of one manifest, replaced, removed or added."""
    body = copy.deepcopy(draw(body_strategy))
    target = body
    if draw(st.booleans()):
        target = draw(st.sampled_from(body["results"]))
    fields = sorted(target) + ["value", "summary", "extra", "workloads"]
    name = draw(st.sampled_from(fields))
    change = draw(st.sampled_from(["replace", "remove"]))
    if change == "remove":
        target.pop(name, None)
    else:
        target[name] = draw(odd_values)
    return body


def schema_load(body: dict) -> object:
    try:
        return SCHEMA.load(copy.deepcopy(body))
    except ValidationError:
        return REFUSED


@given(batches())
def test_a_plain_batch_is_loaded_without_the_schema_and_as_it_would_be(body):
    loaded = plain_result_batch(copy.deepcopy(body))
    assert loaded is not None
    assert loaded == schema_load(body)


@settings(max_examples=500)
@given(altered(batches(max_items=3)))
def test_any_other_body_is_left_to_the_schema_or_loaded_as_it_would_load_it(body):
    loaded = plain_result_batch(copy.deepcopy(body))
    if loaded is not None:
        assert loaded == schema_load(body)


def test_a_batch_the_schema_refuses_is_never_loaded_plainly():
    item = {"task_id": str(uuid.uuid4()), "attempt": 1, "lease_token": "cwl_" + "a" * 64}
    for refused in (
        {"worker_id": "w", "results": []},
        {"worker_id": "w", "results": [item] * 1001},
        {"worker_id": "w\x00", "results": [item]},
        {"worker_id": "w", "results": [{**item, "attempt": 0}]},
        {"worker_id": "w", "results": [{**item, "attempt": True}]},
        {"worker_id": "w", "results": [{**item, "metrics": None}]},
        {"worker_id": "w", "results": [item], "workloads": []},
    ):
        assert schema_load(refused) is REFUSED
        assert plain_result_batch(refused) is None
