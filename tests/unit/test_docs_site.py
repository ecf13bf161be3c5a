"""The documentation site builds with `mkdocs build --strict` (a broken link or a page left
out of the nav fails it) and its pages load nothing from another host, so it reads offline."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# What makes a page fetch something: scripts, stylesheets, icons, images, frames, and CSS.
FETCHES = re.compile(
    r"<(?:script|img|iframe|source|link)\b[^>]*\b(?:src|href)=[\"']((?:https?:)?//[^\"']+)"
    r"|@import\s+(?:url\()?[\"']?((?:https?:)?//[^\"')]+)"
    r"|url\([\"']?((?:https?:)?//[^\"')]+)",
    re.IGNORECASE,
)


def build(source: Path, into: Path) -> subprocess.CompletedProcess:
    """Run `mkdocs build --strict` on the site whose mkdocs.yml is in source.

    Never --quiet: it hides the warnings --strict turns into a failed build.
    """
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(into)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    into = tmp_path_factory.mktemp("site")
    result = build(REPO, into)
    assert result.returncode == 0, result.stdout + result.stderr
    return into


def test_the_site_builds_strictly_with_every_page_in_the_nav_and_no_broken_link(site):
    assert (site / "index.html").exists()
    assert (site / "reference" / "routes" / "index.html").exists()


def test_no_built_page_or_stylesheet_loads_anything_from_another_host(site):
    fetched = {
        f"{path.relative_to(site)}: {next(url for url in match if url)}"
        for path in [*site.rglob("*.html"), *site.rglob("*.css")]
        for match in FETCHES.findall(path.read_text(errors="replace"))
    }
    assert not fetched, sorted(fetched)


def test_a_broken_link_fails_the_build(tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(REPO / "mkdocs.yml", copy / "mkdocs.yml")
    shutil.copytree(REPO / "docs", copy / "docs")
    shutil.copytree(REPO / "deploy", copy / "deploy")  # pages include files from it
    index = copy / "docs" / "index.md"
    index.write_text(index.read_text() + "\n[gone](no-such-page.md)\n")
    result = build(copy, tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stdout + result.stderr


def test_the_docs_show_the_committed_reports_timeline_as_it_is():
    # make report writes reports/timeline.png; the docs can only show files under docs/.
    copy = (REPO / "docs" / "images" / "timeline.png").read_bytes()
    assert copy == (REPO / "reports" / "timeline.png").read_bytes(), (
        "cp reports/timeline.png docs/images/timeline.png"
    )
