"""`python -m app.migrations` refuses loudly rather than apply nothing."""

from __future__ import annotations

import subprocess
import sys

from app import migrations


def test_apply_without_any_migration_exits_non_zero_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.setenv("CHUNKWISE_MIGRATIONS_DIR", str(tmp_path))

    status = migrations.main(["apply"])

    err = capsys.readouterr().err
    assert status != 0
    assert err.count("\n") == 1
    assert f"no migrations found in {tmp_path}" in err
    assert "CHUNKWISE_MIGRATIONS_DIR" in err


def test_apply_without_database_url_exits_non_zero_naming_it(monkeypatch, capsys):
    monkeypatch.delenv("DATABASE_URL", raising=False)

    status = migrations.main(["apply"])

    err = capsys.readouterr().err
    assert status != 0
    assert err.count("\n") == 1
    assert "DATABASE_URL" in err


def test_a_checkout_reads_the_migrations_from_its_sql_directory():
    assert migrations.MIGRATIONS_DIR.name == "sql"
    assert migrations.migration_ids()[0] == "0001.queue"


def test_running_it_as_a_module_warns_about_nothing(monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    # runpy warns when the package imported the module before it runs as __main__.
    run = [sys.executable, "-W", "error", "-m", "app.migrations", "apply"]

    done = subprocess.run(run, capture_output=True, text=True, timeout=60, check=False)

    assert "Warning" not in done.stderr
    assert done.stderr.count("\n") == 1 and "DATABASE_URL" in done.stderr
