"""Every documentation example marked runnable runs, top to bottom, against a real stack, and
prints what the page says it prints, so the docs cannot drift from the code.

A fenced ```bash block right after a `<!-- runnable -->` line is run with bash -euo pipefail,
a ```python block with the venv's Python (CHUNKWISE_URL, CHUNKWISE_TOKEN and
CHUNKWISE_WORKER_TOKEN set to the stack's, the venv's commands on PATH, a csv_stats worker
running, and `render` and `square` workloads the coordinator serves); a page's blocks run in
order in one scratch directory, so a file one block writes is there for the next. A ```text
block right after a `<!-- output -->` line names lines the block before it must print, each
on a line of its own (surrounding blanks ignored).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field

import pytest

from devstack.observe import FAST
from devstack.stack import BIN, REPO

MARKED = re.compile(
    r"^<!-- (runnable|output) -->\n```(\w+)[^\n]*\n(.*?)^```$", re.MULTILINE | re.DOTALL
)


@dataclass
class Example:
    """One runnable block, and the lines it must print."""

    language: str
    code: str
    expected: list[str] = field(default_factory=list)


def examples(text: str) -> list[Example]:
    """The runnable blocks of a page's text, each with its expected output."""
    found: list[Example] = []
    for kind, language, body in MARKED.findall(text):
        if kind == "runnable":
            found.append(Example(language, body))
        elif found:
            found[-1].expected += [line.strip() for line in body.splitlines() if line.strip()]
    return found


PAGES = sorted(
    str(path.relative_to(REPO))
    for path in [REPO / "README.md", *(REPO / "docs").rglob("*.md")]
    if examples(path.read_text())
)


def test_the_pages_with_runnable_examples_include_the_readme_and_the_first_jobs():
    assert {
        "README.md",
        "docs/getting-started/first-csv-job.md",
        "docs/guides/jobs.md",
        "docs/guides/sdk.md",
    } <= set(PAGES)


def test_a_marked_block_is_found_with_the_lines_it_must_print_and_unmarked_ones_are_not():
    text = (
        "```bash\nnot run\n```\n<!-- runnable -->\n```bash\necho hi\n```\n\n"
        "<!-- output -->\n```text\n hi \n\n```\n"
    )
    (example,) = examples(text)
    assert (example.language, example.code, example.expected) == ("bash", "echo hi\n", ["hi"])


# How a block of each language is run: its code is the last argument.
RUNNERS = {"bash": ["bash", "-euo", "pipefail", "-c"], "python": [str(BIN / "python"), "-c"]}


@pytest.fixture
def stack_env() -> dict:
    """The e2e timings, and the manifest workload the docs' examples submit jobs of."""
    return {**FAST, "CHUNKWISE_ALLOWED_WORKLOADS": "render,square"}


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_every_runnable_example_of_the_page_runs_and_prints_what_it_shows(page, stack, tmp_path):
    stack.start_worker("worker-1")
    env = {
        **os.environ,
        "CHUNKWISE_URL": stack.url,
        "CHUNKWISE_TOKEN": stack.tokens.user,
        "CHUNKWISE_WORKER_TOKEN": stack.tokens.worker,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    workdir = tmp_path / "work"
    workdir.mkdir()
    for number, example in enumerate(examples((REPO / page).read_text()), start=1):
        assert example.language in RUNNERS, f"{page} block {number}: bash or python blocks run"
        result = subprocess.run(
            [*RUNNERS[example.language], example.code],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        where = f"{page}, runnable block {number}:\n{example.code}\nstdout:\n{result.stdout}"
        assert result.returncode == 0, f"{where}\nstderr:\n{result.stderr}"
        printed = [line.strip() for line in result.stdout.splitlines()]
        missing = [line for line in example.expected if line not in printed]
        assert not missing, f"{where}\nmissing lines: {missing}"
