"""bench.job_statements' count of the statements a CSV job costs."""

from __future__ import annotations

from bench.job_statements import print_calls
from bench.statements import Statement


def test_a_jobs_statements_leave_out_the_counters_own_and_list_the_most_frequent_first(capsys):
    statements = [
        Statement("WITH held AS (SELECT count(*) FROM tasks)", 20, 10.0, 0.0),
        Statement("SELECT job_id, status, sum(n) FROM job_tallies", 50, 1.0, 0.0),
        Statement("SELECT pg_stat_statements_reset()", 1, 0.1, 0.0),
    ]

    print_calls(statements, jobs=5)

    lines = capsys.readouterr().out.splitlines()
    # (20 + 50) calls over 5 jobs; the reset is the count's own statement, not the job's.
    assert lines[0] == "statements a job: 14.0"
    assert [line.split()[:2] for line in lines[2:]] == [["10.0", "0.020"], ["4.0", "0.500"]]
