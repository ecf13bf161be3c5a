"""The reference pages cannot drift from the code: each is generated from it, or checked
against it both ways."""

import re
from pathlib import Path

from flask import Flask

import app.metrics
from app import config
from devstack import reference_docs

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "docs" / "reference"


def table_names(page: str, prefix: str) -> set[str]:
    """The names (`prefix...`) in the first column of a page's tables."""
    text = (REFERENCE / page).read_text()
    first_columns = [line.split("|")[1] for line in text.splitlines() if line.startswith("| `")]
    return set(re.findall(rf"`({prefix}[A-Za-z0-9_]*)`", " ".join(first_columns)))


def test_each_generated_reference_page_is_what_the_code_generates_now():
    stale = [
        str(path.relative_to(REPO))
        for path, text in reference_docs.pages().items()
        if not path.exists() or path.read_text() != text
    ]
    assert not stale, f"run `python -m devstack.reference_docs` (make docs): {stale}"


def test_the_routes_page_lists_every_operation_of_the_openapi_document():
    spec = reference_docs.openapi_document()
    page = (REFERENCE / "routes.md").read_text()
    for path, operations in spec["paths"].items():
        for method in operations:
            assert f"| `{method.upper()}` | `{path}` |" in page, (method, path)


def test_the_configuration_page_names_every_variable_the_settings_loader_knows_and_no_other():
    documented = table_names("configuration.md", "CHUNKWISE_")
    assert documented == set(config.KNOWN_VARIABLES), (
        f"undocumented: {sorted(set(config.KNOWN_VARIABLES) - documented)}, "
        f"unknown to app/config.py: {sorted(documented - set(config.KNOWN_VARIABLES))}"
    )


def exported_families(monkeypatch) -> set[str]:
    """Every metric family a coordinator's /metrics can carry."""
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    exporter = app.metrics.init_app(Flask(__name__), runtime=None, scrape_token=None)
    collectors = set(exporter.registry._names_to_collectors.values())
    families = {family.name for collector in collectors for family in collector.describe()}
    # The database's families are built at scrape time by the queue collector: read its source.
    source = Path(app.metrics.__file__).read_text()
    return families | set(re.findall(r'"(chunkwise_cluster_[a-z0-9_]+)"', source))


def test_the_metrics_page_names_every_exported_series_and_no_other(monkeypatch):
    families = {name for name in exported_families(monkeypatch) if name.startswith("chunkwise")}
    documented = table_names("metrics.md", "chunkwise_")
    # A counter's family is named without the _total its samples carry.
    undocumented = {f for f in families if not {f, f"{f}_total"} & documented}
    unknown = {d for d in documented if not {d, d.removesuffix("_total")} & families}
    assert not undocumented and not unknown, (undocumented, unknown)


def test_the_exit_codes_page_gives_every_exit_status_of_the_chunkwise_command():
    from worker_cli.commands import invocation

    statuses = {value for name, value in vars(invocation).items() if name.startswith("EXIT_")}
    text = (REFERENCE / "exit-codes.md").read_text()
    documented = {int(s) for s in re.findall(r"^\| (\d+) \|", text, re.MULTILINE)}
    assert documented == statuses
