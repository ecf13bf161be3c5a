"""The default idempotency key: the same file and parameters always name the same job."""

from __future__ import annotations

import hashlib
import io

import pytest

from worker_cli.chunkwise import run
from worker_cli.commands.idempotency_keys import KEY_PREFIX, default_idempotency_key, file_sha256
from worker_cli.commands.invocation import EXIT_OK

DIGEST = "a" * 64
PARAMS = {
    "column": "value",
    "delimiter": ",",
    "chunks": 4,
    "priority": 0,
    "labels": {"team": "a", "run": "7"},
}


def test_the_same_file_and_parameters_give_the_same_key():
    assert default_idempotency_key(DIGEST, **PARAMS) == default_idempotency_key(DIGEST, **PARAMS)


def test_label_order_does_not_change_the_key():
    reordered = {**PARAMS, "labels": {"run": "7", "team": "a"}}
    assert default_idempotency_key(DIGEST, **reordered) == default_idempotency_key(DIGEST, **PARAMS)


@pytest.mark.parametrize(
    "change",
    [
        {"column": "other"},
        {"delimiter": ";"},
        {"chunks": 5},
        {"priority": 1},
        {"labels": {"team": "b", "run": "7"}},
        {"labels": {"team": "a"}},
        {"not_before": "2026-12-06T00:00:00+00:00"},
    ],
)
def test_any_changed_parameter_changes_the_key(change):
    assert default_idempotency_key(DIGEST, **{**PARAMS, **change}) != default_idempotency_key(
        DIGEST, **PARAMS
    )


def test_a_submit_without_a_schedule_keeps_the_key_it_had_before_schedules():
    # The key of stop 30's chunkwise for these parameters, so re-runs still find their jobs.
    assert (
        default_idempotency_key(DIGEST, **PARAMS)
        == KEY_PREFIX
        + hashlib.sha256(
            b'{"chunks":4,"column":"value","delimiter":",","file_sha256":"'
            + DIGEST.encode()
            + b'","labels":{"run":"7","team":"a"},"priority":0}'
        ).hexdigest()
    )


def test_other_file_bytes_change_the_key():
    assert default_idempotency_key("b" * 64, **PARAMS) != default_idempotency_key(DIGEST, **PARAMS)


def test_the_key_fits_the_servers_header_limit():
    key = default_idempotency_key(DIGEST, **{**PARAMS, "column": "x" * 1000})
    assert key.startswith(KEY_PREFIX) and 1 <= len(key) <= 200


def test_file_digest_is_the_sha256_of_its_bytes(tmp_path):
    path = tmp_path / "data.csv"
    path.write_bytes(b"v\n" * 1_000_000)
    assert file_sha256(str(path)) == hashlib.sha256(path.read_bytes()).hexdigest()


class SubmitRecorder:
    """Records every submit_csv_job call."""

    def __init__(self, url, token):
        self.calls: list[dict] = []
        SubmitRecorder.last = self

    def submit_csv_job(self, file, **kwargs):
        self.calls.append({"bytes": file.read(), **kwargs})
        return {"id": "6e56eaf5-06ec-450f-a4f0-f652955b2d63"}

    def close(self):
        pass


def submit(argv):
    out = io.StringIO()
    env = {"CHUNKWISE_URL": "http://c.test", "CHUNKWISE_TOKEN": "cwu_t"}
    status = run(
        ["submit", *argv], client_factory=SubmitRecorder, out=out, err=io.StringIO(), environ=env
    )
    return status, out.getvalue(), SubmitRecorder.last.calls


def test_submitting_twice_sends_the_same_derived_key(tmp_path):
    path = tmp_path / "data.csv"
    path.write_bytes(b"id,value\n1,5\n")
    argv = [str(path), "--column", "value", "--chunks", "2", "--label", "team=a"]
    (first, out, [call]), (second, _, [again]) = submit(argv), submit(argv)
    assert first == second == EXIT_OK
    assert out == "6e56eaf5-06ec-450f-a4f0-f652955b2d63\n"
    expected = default_idempotency_key(
        hashlib.sha256(path.read_bytes()).hexdigest(),
        column="value",
        delimiter=",",
        chunks=2,
        priority=0,
        labels={"team": "a"},
    )
    assert call["idempotency_key"] == again["idempotency_key"] == expected
    assert call["bytes"] == path.read_bytes()
    assert call["labels"] == {"team": "a"} and call["chunks"] == 2


def test_an_explicit_idempotency_key_wins(tmp_path):
    path = tmp_path / "data.csv"
    path.write_bytes(b"id,value\n1,5\n")
    _, _, [call] = submit([str(path), "--column", "value", "--idempotency-key", "mine"])
    assert call["idempotency_key"] == "mine"
