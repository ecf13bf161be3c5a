"""deploy/grafana-dashboard.json is a dashboard Grafana can import, and every series it queries
is one a coordinator exports or a recording rule deploy/chunkwise-rules.yml defines."""

import json
import re
from pathlib import Path

import yaml
from flask import Flask

import app.metrics

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = json.loads((REPO / "deploy" / "grafana-dashboard.json").read_text())
# What a query names: metric names and recording rules (level:metric:operation), not the
# functions, labels or label values around them.
SERIES = re.compile(r"\bchunkwise[a-z0-9_:]*")
# The suffixes prometheus_client adds to a family's samples (counters, histograms, gauge
# histograms).
SUFFIXES = ("", "_total", "_created", "_bucket", "_sum", "_count", "_gcount", "_gsum")


def exported_series(monkeypatch) -> set[str]:
    """Every series name a coordinator's /metrics can carry."""
    # Per-process series: the app's exporter and services/metrics.py, registered as
    # app.metrics.init_app does in one process (the queue collector needs the database and
    # is read from its source below).
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    exporter = app.metrics.init_app(Flask(__name__), runtime=None, scrape_token=None)
    names = set(exporter.registry._names_to_collectors)
    # The database's series: the families the queue collector builds at scrape time.
    source = Path(app.metrics.__file__).read_text()
    families = set(re.findall(r'"(chunkwise_cluster_[a-z0-9_]+)"', source))
    names |= {family + suffix for family in families for suffix in SUFFIXES}
    return names


def recording_rules() -> dict[str, str]:
    """The recording rules for a fleet (docs/guides/monitoring.md includes them): record -> expr."""
    document = yaml.safe_load((REPO / "deploy" / "chunkwise-rules.yml").read_text())
    rules = document["groups"][0]["rules"]
    return {rule["record"]: rule["expr"] for rule in rules}


def queries() -> list[str]:
    """Every query of every panel."""
    return [target["expr"] for panel in DASHBOARD["panels"] for target in panel.get("targets", [])]


def test_the_dashboard_is_importable_json_with_panels_and_a_datasource_choice():
    assert DASHBOARD["title"] and DASHBOARD["uid"] and isinstance(DASHBOARD["schemaVersion"], int)
    variables = {v["name"]: v for v in DASHBOARD["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    graphs = [p for p in DASHBOARD["panels"] if p["type"] != "row"]
    assert graphs and all(p["targets"] for p in graphs)
    assert len({p["id"] for p in DASHBOARD["panels"]}) == len(DASHBOARD["panels"])
    for panel in graphs:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]


def test_every_series_the_dashboard_queries_is_exported_or_recorded(monkeypatch):
    exported, rules = exported_series(monkeypatch), recording_rules()
    named = {name for query in queries() for name in SERIES.findall(query)}
    assert named, "expected chunkwise series in the dashboard's queries"
    unknown = {name for name in named if name not in exported and name not in rules}
    assert not unknown, unknown
    # A recording rule the dashboard leans on must itself read series that exist.
    for name in named & set(rules):
        assert set(SERIES.findall(rules[name])) <= exported, rules[name]


def test_the_dashboard_uses_the_recording_rules_and_sums_only_per_process_series(monkeypatch):
    rules = recording_rules()
    named = {name for query in queries() for name in SERIES.findall(query)}
    assert set(rules) <= named, set(rules) - named
    # The database's figures are the same on every coordinator: summed, a fleet counts twice.
    for query in queries():
        if "chunkwise_cluster_" in query:
            assert not re.search(r"\bsum\b", query), query
