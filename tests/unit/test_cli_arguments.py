"""chunkwise argument parsing: shared options, environment, labels, ids, usage errors."""

from __future__ import annotations

import io

import pytest

from worker_cli.chunkwise import build_parser, parse_arguments, run
from worker_cli.commands.invocation import EXIT_OK, EXIT_USAGE
from worker_cli.commands.queue import workload_caps

JOB = "6e56eaf5-06ec-450f-a4f0-f652955b2d63"
ENV = {"CHUNKWISE_URL": "http://coordinator.test", "CHUNKWISE_TOKEN": "cwu_env"}


class RecordingClient:
    """Answers get_job and remembers how it was built."""

    built: list[tuple[str, str]] = []

    def __init__(self, url: str, token: str):
        RecordingClient.built.append((url, token))

    def get_job(self, job_id, *, trace_id):
        return {
            "id": job_id,
            "status": "queued",
            "workload": "csv_stats",
            "progress": 0.0,
            "chunks_completed": 0,
            "chunks_total": 1,
            "priority": 0,
        }

    def close(self):
        pass


def run_quietly(argv, environ=ENV):
    RecordingClient.built = []
    out, err = io.StringIO(), io.StringIO()
    status = run(argv, client_factory=RecordingClient, out=out, err=err, environ=environ)
    return status, out.getvalue(), err.getvalue()


def test_url_and_token_come_from_the_environment():
    status, _, _ = run_quietly(["status", JOB])
    assert status == EXIT_OK
    assert RecordingClient.built == [("http://coordinator.test", "cwu_env")]


@pytest.mark.parametrize(
    "argv",
    [
        ["--url", "http://flag.test", "--token", "cwu_flag", "status", JOB],
        ["status", JOB, "--url", "http://flag.test", "--token", "cwu_flag"],
        ["--url", "http://flag.test", "status", "--token", "cwu_flag", JOB],
    ],
)
def test_flags_override_the_environment_before_or_after_the_command(argv):
    status, _, _ = run_quietly(argv)
    assert status == EXIT_OK
    assert RecordingClient.built == [("http://flag.test", "cwu_flag")]


def test_json_flag_is_accepted_before_or_after_the_command():
    assert build_parser().parse_args(["--json", "jobs"]).json is True
    assert build_parser().parse_args(["jobs", "--json"]).json is True
    assert not hasattr(build_parser().parse_args(["jobs"]), "json")


@pytest.mark.parametrize("missing", ["CHUNKWISE_URL", "CHUNKWISE_TOKEN"])
def test_missing_url_or_token_is_a_usage_error_naming_it(missing):
    environ = {k: v for k, v in ENV.items() if k != missing}
    status, _, err = run_quietly(["status", JOB], environ=environ)
    assert status == EXIT_USAGE
    assert missing in err
    assert RecordingClient.built == []


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["frobnicate"],
        ["status"],
        ["status", "not-a-uuid"],
        ["submit", "data.csv"],  # --column is required
        ["submit", "data.csv", "--column", "v", "--label", "no-equals-sign"],
        ["submit", "data.csv", "--column", "v", "--chunks", "many"],
        ["jobs", "--status", "sleeping"],
        ["jobs", "--label", "=value"],
        ["jobs", "--depends-on", "not-a-uuid"],
        ["events", "--after", "yesterday"],
        ["events", "--job", "not-a-uuid"],
        ["submit", "data.csv", "--column", "v", "--not-before", "tomorrow"],
        ["submit", "data.csv", "--column", "v", "--not-before", "2026-12-06T10:00:00"],
        ["pause-workload"],
        ["resume-workload"],
        ["pause-workload", "echo", "render"],
        ["workloads", "echo"],
        ["cancel-jobs"],
        ["cancel-jobs", "--limit", "5"],
        ["cancel-jobs", "--status", "succeeded"],
        ["cancel-jobs", "--label", "no-equals-sign"],
        ["cancel-jobs", "--depends-on", "not-a-uuid"],
    ],
)
def test_bad_usage_exits_2_without_calling_the_coordinator(argv):
    status, _, err = run_quietly(argv)
    assert status == EXIT_USAGE
    assert "usage:" in err
    assert RecordingClient.built == []


@pytest.mark.parametrize("url", ["coordinator.test:8000", "ftp://coordinator.test", "http://"])
def test_a_url_that_is_not_http_is_a_usage_error(url):
    status, _, err = run_quietly(["status", JOB], environ={**ENV, "CHUNKWISE_URL": url})
    assert status == EXIT_USAGE
    assert "http://" in err and RecordingClient.built == []


@pytest.mark.parametrize(
    ("setting", "value", "said"),
    [
        ("CHUNKWISE_URL", "http://[::1", "is not a URL"),
        ("CHUNKWISE_URL", "http://coordinator.test:port", "is not a URL"),
        ("CHUNKWISE_TOKEN", "cwu_\u20ac", "printable ASCII"),
        ("CHUNKWISE_TOKEN", "cwu_x\nInjected: 1", "printable ASCII"),
    ],
)
def test_a_url_or_token_no_request_could_carry_is_a_usage_error(setting, value, said):
    status, _, err = run_quietly(["status", JOB], environ={**ENV, setting: value})
    assert status == EXIT_USAGE
    assert said in err and RecordingClient.built == []


def test_submit_of_a_missing_file_is_a_usage_error(tmp_path):
    status, _, err = run_quietly(["submit", str(tmp_path / "absent.csv"), "--column", "v"])
    assert status == EXIT_USAGE
    assert "absent.csv" in err


@pytest.mark.parametrize(
    ("content", "said"), [(None, "No such file"), ("{", "Expecting"), ("[1]", "not an object")]
)
def test_a_schedule_whose_job_file_holds_no_json_object_is_a_usage_error(content, said, tmp_path):
    path = tmp_path / "job.json"
    if content is not None:
        path.write_text(content)

    status, _, err = run_quietly(["schedule", "nightly", "--cron", "@daily", "--job", str(path)])

    assert status == EXIT_USAGE
    assert said in err and RecordingClient.built == []


def test_help_exits_0(capsys):
    assert run(["--help"]) == EXIT_OK
    assert "submit" in capsys.readouterr().out


def test_cancel_jobs_without_a_filter_is_a_usage_error_naming_the_filters():
    status, out, err = run_quietly(["cancel-jobs", "--limit", "5"])

    assert (status, out, RecordingClient.built) == (EXIT_USAGE, "", [])
    assert "usage: chunkwise cancel-jobs" in err
    assert "give at least one filter: --workload, --label, --owner, --depends-on, --status" in err


def test_cancel_jobs_filters_parse_as_the_jobs_filters_do():
    args = build_parser().parse_args(
        [
            "cancel-jobs",
            "--workload",
            "echo",
            "--label",
            "team=a=b",
            "--owner",
            "bob",
            "--depends-on",
            JOB.upper(),
            "--status",
            "merging",
            "--limit",
            "50",
        ]
    )
    assert (args.workload, args.label, args.owner, args.depends_on, args.status, args.limit) == (
        "echo",
        "team=a=b",
        "bob",
        JOB,
        "merging",
        50,
    )


def test_labels_repeat_and_split_at_the_first_equals_sign():
    args = build_parser().parse_args(
        ["submit", "f.csv", "--column", "v", "--label", "team=a", "--label", "expr=x=y"]
    )
    assert args.label == [("team", "a"), ("expr", "x=y")]


def test_job_ids_are_normalised_uuids():
    args = build_parser().parse_args(["status", JOB.upper()])
    assert args.job == JOB


@pytest.mark.parametrize("spelling", ["\\t", "tab", "\t"])
def test_a_tab_delimiter_can_be_spelled_out(spelling):
    args = build_parser().parse_args(["submit", "f.csv", "--column", "v", "--delimiter", spelling])
    assert args.delimiter == "\t"


def test_submit_defaults_match_the_servers():
    args = build_parser().parse_args(["submit", "f.csv", "--column", "v"])
    assert (args.delimiter, args.chunks, args.priority, args.label, args.wait) == (
        ",",
        1,
        0,
        None,
        False,
    )


def test_events_follow_options_are_bounded_on_request():
    args = build_parser().parse_args(
        ["events", "--after", "7", "--follow", "--max-events", "3", "--timeout", "2.5"]
    )
    assert (args.after, args.follow, args.max_events, args.timeout) == (7, True, 3, 2.5)


@pytest.mark.parametrize(
    ("argv", "caps"),
    [
        (["workloads", "add", "square"], {}),
        (
            [
                "workloads",
                "add",
                "square",
                "--max-queued-tasks",
                "50",
                "--max-starts-per-second",
                "2.5",
            ],
            {"max_queued_tasks": 50, "max_starts_per_second": 2.5},
        ),
        (["workloads", "change", "echo", "--max-leases-total", "none"], {"max_leases_total": None}),
    ],
)
def test_workload_caps_are_sent_only_when_given_and_none_lifts_one(argv, caps):
    assert workload_caps(parse_arguments(argv)) == caps
