"""The CSV core stays pure: importing it must not pull in the web, database or HTTP stacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("flask", "psycopg", "requests")


def fresh_interpreter(probe: str) -> subprocess.CompletedProcess:
    """Run probe in a new Python at the checkout's root, so sys.modules holds only its imports."""
    return subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_importing_csvstats_loads_no_flask_psycopg_or_requests():
    probe = (
        "import json, sys; import services.csvstats; "
        f"print(json.dumps([m for m in {FORBIDDEN!r} "
        "if any(n == m or n.startswith(m + '.') for n in sys.modules)]))"
    )
    done = fresh_interpreter(probe)
    assert json.loads(done.stdout) == []


def test_the_compiled_engine_module_imports_polars_only_when_first_used():
    probe = (
        "import sys; import services.csvstats.columnar; "
        "print(any(n == 'polars' or n.startswith('polars.') for n in sys.modules))"
    )
    done = fresh_interpreter(probe)
    assert done.stdout.strip() == "False"


def test_the_numpy_split_module_imports_numpy_only_when_first_used():
    probe = (
        "import sys; import services.csvstats, services.csvstats.vectorized; "
        "print(any(n == 'numpy' or n.startswith('numpy.') for n in sys.modules))"
    )
    done = fresh_interpreter(probe)
    assert done.stdout.strip() == "False"


def test_a_coordinator_loads_numpy_when_its_uploads_are_set_up_not_on_its_first_split():
    pytest.importorskip("numpy")
    probe = (
        "import sys, tempfile, pathlib; from flask import Flask; from app import uploads; "
        "uploads.init_app(Flask('probe'), pathlib.Path(tempfile.gettempdir()), 1024); "
        "print('numpy' in sys.modules)"
    )
    done = fresh_interpreter(probe)
    assert done.stdout.strip() == "True"
