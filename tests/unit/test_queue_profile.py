"""bench.queue_profile's table of the database's statements."""

from __future__ import annotations

from bench.queue_profile import print_statements
from bench.statements import Statement


def test_each_statement_is_shown_per_call_and_per_task_in_the_order_given(capsys):
    counter = Statement("UPDATE jobs SET chunks_completed = chunks_completed + $1", 10, 20.0, 1.0)
    read = Statement("SELECT id FROM tasks WHERE id = ANY($1)", 10, 2.0, 3.0)

    print_statements([counter, read], tasks=80)

    lines = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in lines if line.lstrip().startswith("10 ")]
    # 21 ms over 80 tasks is 262.5 us a task; 5 ms is 62.5.
    assert rows[0][:4] == ["10", "2.000", "0.100", "262.5"] and rows[0][4] == "UPDATE"
    assert rows[1][:4] == ["10", "0.200", "0.300", "62.5"] and rows[1][4] == "SELECT"


def test_a_long_statement_is_cut_to_seventy_characters(capsys):
    print_statements([Statement("SELECT " + "x, " * 100 + "1", 1, 1.0, 0.0)], tasks=1)

    row = capsys.readouterr().out.splitlines()[-1]
    assert row.endswith(("SELECT " + "x, " * 100)[:70])
