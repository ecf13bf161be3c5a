"""The pure figures of the reliability report: spreads, tallies, time to healthy, rendering."""

from __future__ import annotations

from bench.reliability.figures import (
    render_markdown,
    round_ok,
    scenario_summary,
    spread,
    tally,
    time_to_healthy,
)


def test_spread_ignores_missing_values_and_rounds():
    assert spread([3.0, None, 1.0, 2.004]) == {"n": 3, "min": 1.0, "median": 2.0, "max": 3.0}
    assert spread([None]) == {"n": 0}


def test_tally_counts_values_by_their_text_in_order():
    assert tally([409, "409", 200, None]) == {"200": 1, "409": 2, "None": 1}


def test_time_to_healthy_is_from_the_fault_to_the_start_of_the_last_healthy_run():
    samples = [(0.0, True), (1.0, False), (1.5, True), (2.0, False), (2.5, True), (3.0, True)]

    assert time_to_healthy(samples, fault_at=0.9) == 1.6


def test_time_to_healthy_is_zero_when_nothing_failed_and_none_when_it_never_recovered():
    assert time_to_healthy([(1.0, True), (2.0, True)], fault_at=0.5) == 0.5
    assert time_to_healthy([(1.0, True)], fault_at=1.0) == 0.0
    assert time_to_healthy([(1.0, True), (2.0, False)], fault_at=0.0) is None
    assert time_to_healthy([], fault_at=0.0) is None


def test_a_round_fails_on_an_error_a_broken_invariant_or_an_inexact_result():
    assert round_ok({"round": 1, "violations": {}, "exact": True})
    assert not round_ok({"round": 1, "error": "TimeoutError: x"})
    assert not round_ok({"round": 1, "violations": {"leased_task_has_owner": [{}]}})
    assert not round_ok({"round": 1, "exact": False})


def test_summary_names_the_failed_rounds():
    rounds = [{"round": 1, "exact": True}, {"round": 2, "exact": False}]

    assert scenario_summary(rounds) == {"rounds": 2, "passed": 1, "failed_rounds": [2]}


def test_markdown_has_a_row_per_round_and_says_why_a_round_failed():
    rounds = [
        {"round": 1, "answers": {"200": 49, "201": 1}, "exact": True, "violations": {}},
        {"round": 2, "error": "TimeoutError: slow", "traceback": "...", "violations": {}},
        {"round": 3, "answers": {"500": 1}, "exact": False, "violations": {}},
    ]
    report = {
        "started_at": "2026-12-03T13:00:00+00:00",
        "machine": {"cpus": 2, "platform": "Linux"},
        "rounds_setting": 1,
        "duration_seconds": 12.0,
        "timings": {"CHUNKWISE_LEASE_SECONDS": "4"},
        "invariants": ["at most one accepted summary per chunk"],
        "scenarios": {
            "same key": {
                "description": "50 submits.",
                "rounds": rounds,
                "figures": {"answers": {"200": 49}, "wait_s": spread([1.0, 2.0, 3.0])},
                "seconds": 3.5,
                "summary": scenario_summary(rounds),
            }
        },
    }

    text = render_markdown(report)

    assert "| [same key](#same-key) | 3 | 1 | 3.5 |" in text
    assert "- answers: 200=49" in text
    assert "- wait_s: min 1.00, median 2.00, max 3.00 (n=3)" in text
    assert "| 1 | 200=49, 201=1 | yes |" in text
    assert "| 2 |  | **NO** |" in text
    assert "Round 2 failed: error='TimeoutError: slow'" in text
    assert "Round 3 failed: its checks did not hold (answers: 500=1)" in text
    assert "traceback" not in text
