"""Idle workers' rows are forgotten by the maintenance pass, and their /metrics series with them."""

from __future__ import annotations

from app.metrics import MAX_WORKER_SERIES
from devstack.observe import Scrape
from services import maintenance
from tests.integration.csv_worker import settings
from tests.integration.manifests import OTHER_WORKER, WORKER, manifest

HEARTBEAT_AGE = "chunkwise_cluster_worker_heartbeat_age_seconds"


def age_workers(db, seconds: int) -> None:
    """Move every worker's last sighting `seconds` into the past, as the clock would."""
    db.execute("UPDATE workers SET last_seen_at = now() - make_interval(secs => %s)", (seconds,))


def scrape(client, headers) -> Scrape:
    response = client.get("/metrics", headers=headers["operator"])
    assert response.status_code == 200
    return Scrape(response.get_data(as_text=True))


def worker_ids(db) -> set[str]:
    return {r["id"] for r in db.execute("SELECT id FROM workers").fetchall()}


def test_an_idle_worker_without_leases_is_deleted_after_the_retention(
    rt, submit, claim, db, client, headers
):
    submit(manifest(1))
    claim(WORKER)  # holds the only task
    claim(OTHER_WORKER)  # seen, holding nothing
    age_workers(db, rt.limits.worker_retention_seconds + 60)

    maintenance.run_pass(rt)

    assert worker_ids(db) == {WORKER}


def test_a_worker_seen_within_the_retention_is_kept(rt, claim, db):
    claim(WORKER)
    age_workers(db, rt.limits.worker_retention_seconds - 60)

    maintenance.run_pass(rt)

    assert worker_ids(db) == {WORKER}


# A retention shorter than the series' own 15-minute window, so only the deletion drops it.
@settings(CHUNKWISE_WORKER_RETENTION_SECONDS="60")
def test_a_deleted_workers_series_vanish_from_metrics(rt, claim, db, client, headers, monkeypatch):
    # Each scrape reads the database afresh, not the two-second snapshot.
    monkeypatch.setattr("app.metrics.CACHE_SECONDS", 0)
    claim(OTHER_WORKER)
    age_workers(db, 120)
    before = scrape(client, headers)

    maintenance.run_pass(rt)
    claim(WORKER)
    after = scrape(client, headers)

    assert before.has(HEARTBEAT_AGE, worker_id=OTHER_WORKER)
    assert not after.has(HEARTBEAT_AGE, worker_id=OTHER_WORKER)
    assert after.has(HEARTBEAT_AGE, worker_id=WORKER)


def test_a_worker_that_comes_back_after_deletion_is_seen_again(rt, claim, db):
    claim(WORKER)
    age_workers(db, rt.limits.worker_retention_seconds + 60)
    maintenance.run_pass(rt)

    claim(WORKER)

    assert worker_ids(db) == {WORKER}


def test_a_scrape_names_at_most_the_cap_of_worker_series(db, client, headers):
    db.execute(
        "INSERT INTO workers (id, capacity, workloads) "
        "SELECT 'flood-' || n, 1, '{echo}' FROM generate_series(1, %s) AS n",
        (MAX_WORKER_SERIES + 50,),
    )

    series = [s for s in scrape(client, headers).samples if s.name == HEARTBEAT_AGE]

    assert len(series) == MAX_WORKER_SERIES
