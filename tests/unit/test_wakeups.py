"""Job watches in the wake-up counters, without a database (Wakeups(None) never listens)."""

from __future__ import annotations

import threading
import time
import uuid

from services.wakeups import Wakeups


def test_a_change_to_a_watched_job_wakes_its_waiter_at_once():
    wakeups, job = Wakeups(None), uuid.uuid4()
    with wakeups.watching(job):
        seen = wakeups.job_changes(job)
        threading.Timer(0.1, wakeups.job_changed, args=(job,)).start()

        started = time.monotonic()
        wakeups.wait_for_job(job, seen, timeout=5)

        assert time.monotonic() - started < 2
        assert wakeups.job_changes(job) == seen + 1


def test_a_change_to_another_job_does_not_end_the_wait():
    wakeups, job = Wakeups(None), uuid.uuid4()
    with wakeups.watching(job):
        seen = wakeups.job_changes(job)
        wakeups.job_changed(uuid.uuid4())

        started = time.monotonic()
        wakeups.wait_for_job(job, seen, timeout=0.2)

        assert time.monotonic() - started >= 0.2
        assert wakeups.job_changes(job) == seen


def test_a_change_before_the_wait_but_after_the_count_is_not_missed():
    wakeups, job = Wakeups(None), uuid.uuid4()
    with wakeups.watching(job):
        seen = wakeups.job_changes(job)
        wakeups.job_changed(job)

        started = time.monotonic()
        wakeups.wait_for_job(job, seen, timeout=5)

        assert time.monotonic() - started < 1


def test_a_job_is_counted_only_while_someone_watches_it():
    wakeups, job = Wakeups(None), uuid.uuid4()
    wakeups.job_changed(job)  # nobody watches: nothing is kept
    with wakeups.watching(job), wakeups.watching(job):
        wakeups.job_changed(job)
        assert wakeups.job_changes(job) == 1
    with wakeups.watching(job):  # the last watcher left, so the count started over
        assert wakeups.job_changes(job) == 0


def test_waiting_places_run_out_at_the_budget_and_come_back_when_given_up():
    wakeups = Wakeups(None, max_waiting=2)
    with (
        wakeups.waiting(True) as first,
        wakeups.waiting(True) as second,
        wakeups.waiting(True) as third,
    ):
        assert (first, second, third) == (True, True, False)
    with wakeups.waiting(True) as again:
        assert again


def test_a_request_that_does_not_wait_takes_no_place():
    wakeups = Wakeups(None, max_waiting=1)
    with wakeups.waiting(False) as not_waiting, wakeups.waiting(True) as waiting:
        assert (not_waiting, waiting) == (False, True)
