"""A scrape under gunicorn rides out a process creating its metrics file at that moment."""

from __future__ import annotations

import threading

from flask import Flask

from app.metrics import MultiprocessCoordinatorMetrics


class NoQueue:
    """A queue collector with nothing to say."""

    def collect(self):
        return []


def test_a_metrics_file_still_empty_while_its_process_creates_it_is_read_again(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    exporter = MultiprocessCoordinatorMetrics(Flask(__name__), NoQueue())
    # What prometheus_client leaves for an instant: the file opened, not yet sized.
    being_created = tmp_path / "counter_4242.db"
    being_created.touch()
    threading.Timer(0.015, being_created.unlink).start()

    text, content_type = exporter.generate_metrics()

    assert content_type.startswith("text/plain")
