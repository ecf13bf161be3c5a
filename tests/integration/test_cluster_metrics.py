"""Metrics that add up across hosts: what every coordinator reads from the shared database is
named chunkwise_cluster_ (the same on every host: max(), never sum()), what each process
counts itself is not."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from app import create_app
from app.metrics import QueueCollector
from app.runtime import close
from services import metrics
from tests.integration.manifests import manifest

CLUSTER = "chunkwise_cluster_"


def scrape(client, headers) -> dict[tuple, float]:
    """The scrape's samples by (name, labels)."""
    text = client.get("/metrics", headers=headers["operator"]).get_data(as_text=True)
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_every_database_wide_family_is_named_cluster_and_no_per_process_one_is(rt):
    database_wide = [f.name for f in QueueCollector(rt).collect()]
    per_process = [f.name for m in metrics.ALL for f in m.collect()]

    assert database_wide and all(n.startswith(CLUSTER) for n in database_wide)
    assert per_process and not any(n.startswith(CLUSTER) for n in per_process)


def test_two_coordinators_on_one_database_report_the_same_cluster_figures(
    app_config, client, headers, submit, claim
):

    submit(manifest(3))
    claim(capacity=2)
    other = create_app(app_config)
    try:
        here = scrape(client, headers)
        there = scrape(other.test_client(), headers)
    finally:
        close(other.extensions["chunkwise.runtime"])

    assert counts(here) and counts(here) == counts(there)
    assert here[("chunkwise_cluster_active_leases", ())] == 2
    assert any(name.startswith("chunkwise_http_") for name, _ in here)


def counts(samples: dict) -> dict:
    """The cluster samples less the ages, which each scrape reads at its own moment."""
    return {
        key: value
        for key, value in samples.items()
        if key[0].startswith(CLUSTER) and not key[0].endswith("_seconds")
    }
