"""No client can take every thread: long polls, slow headers and slow bodies beside probes.

The production topology: deploy/nginx.conf in front of gunicorn (2 processes x 32 threads,
a waiting budget of 8 each). Every client here is on loopback, bounded in number and time,
and stops by itself.
"""

from __future__ import annotations

import socket
import statistics
import threading
import time
from urllib.parse import urlsplit

import pytest
import requests

from devstack.observe import FAST
from tests.e2e import nginx_proxy
from tests.integration.manifests import manifest

LOAD_SECONDS = 25
POLL_SECONDS = 15
CLAIM_POLLERS, WATCH_POLLERS = 140, 60
SLOW_HEADERS, SLOW_BODIES = 20, 20
PROBE_EVERY = 0.25

needs_nginx = pytest.mark.skipif(
    not nginx_proxy.available(), reason="needs nginx (.ci/run installs nginx-light)"
)


@pytest.fixture
def stack_env() -> dict:
    """The default web capacity and waiting budget; the echo workload for a job to watch."""
    return {**FAST, "CHUNKWISE_ALLOWED_WORKLOADS": "echo,render"}


@pytest.fixture
def proxy(stack, tmp_path):
    """deploy/nginx.conf in front of the stack's gunicorn."""
    front = nginx_proxy.NginxProxy(stack.port, tmp_path / "nginx")
    front.start()
    yield front
    front.stop()


def address(url: str) -> tuple[str, int]:
    """Host and port of a base URL."""
    parts = urlsplit(url)
    return parts.hostname, parts.port


def long_poller(until: float, ask, outcomes: list) -> None:
    """Long-poll until `until`, coming back after Retry-After when told to."""
    with requests.Session() as session:
        while time.monotonic() < until:
            started = time.monotonic()
            try:
                answer = ask(session)
            except requests.RequestException as exc:
                outcomes.append(("error", repr(exc)))
                return
            took = time.monotonic() - started
            refused = answer.headers.get("Retry-After")
            outcomes.append((answer.status_code, "refused" if refused else round(took)))
            if refused:
                time.sleep(min(float(refused), max(0.0, until - time.monotonic())))


def slow_headers(target: tuple[str, int], until: float, closed_after: list) -> None:
    """Send a request line, then a header line every 2 s; note when the server hangs up."""
    started = time.monotonic()
    with socket.create_connection(target, timeout=5) as sock:
        try:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            while time.monotonic() < until:
                sock.sendall(b"X-Slow: 1\r\n")
                sock.settimeout(2)
                try:
                    if sock.recv(4096) == b"":
                        break
                except TimeoutError:
                    continue
        except OSError:
            pass  # reset by the server: hung up
    closed_after.append(time.monotonic() - started)


def slow_body(target: tuple[str, int], token: str, until: float) -> None:
    """Upload a CSV a hundred bytes every 2 s, giving up at `until`."""
    head = (
        f"POST /api/v1/jobs?column=x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: text/csv\r\nContent-Length: 100000\r\n\r\nid,x\n"
    ).encode()
    with socket.create_connection(target, timeout=5) as sock:
        try:
            sock.sendall(head)
            while time.monotonic() < until:
                sock.sendall(b"1,2\n" * 25)
                time.sleep(2)
        except OSError:
            pass


def probe(url: str, session: requests.Session, until: float, latencies: list) -> None:
    """GET url every PROBE_EVERY seconds until `until`, recording each answer's latency."""
    while time.monotonic() < until:
        started = time.monotonic()
        try:
            status = session.get(url, timeout=10).status_code
        except requests.RequestException:
            status = None
        latencies.append((time.monotonic() - started, status))
        time.sleep(PROBE_EVERY)


def figures(latencies: list) -> str:
    """p50 and max of the probe latencies, in milliseconds."""
    seconds = [s for s, _ in latencies]
    return (
        f"n={len(seconds)} p50={statistics.median(seconds) * 1000:.0f}ms "
        f"max={max(seconds) * 1000:.0f}ms"
    )


@needs_nginx
def test_health_and_user_calls_answer_within_a_second_under_long_polls_and_slow_clients(
    stack, proxy
):
    user, worker = stack.api(), stack.api(stack.tokens.worker)
    job = user.post(f"{proxy.url}/api/v1/jobs", json=manifest(2), timeout=10).json()
    etag = user.get(f"{proxy.url}/api/v1/jobs/{job['id']}", timeout=10).headers["ETag"]
    claim = {"worker_id": "idle", "workloads": ["render"], "capacity": 1}
    claim["wait_seconds"] = POLL_SECONDS
    user_headers = {"Authorization": user.headers["Authorization"], "If-None-Match": etag}

    def claim_task(session):
        return session.post(
            f"{proxy.url}/api/v1/tasks/claim",
            json=claim,
            headers={"Authorization": worker.headers["Authorization"]},
            timeout=POLL_SECONDS + 10,
        )

    def watch_job(session):
        return session.get(
            f"{proxy.url}/api/v1/jobs/{job['id']}?wait_seconds={POLL_SECONDS}",
            headers=user_headers,
            timeout=POLL_SECONDS + 10,
        )

    until = time.monotonic() + LOAD_SECONDS
    polls: list = []
    through_proxy: list = []
    direct: list = []
    health, job_list, direct_health = [], [], []
    threads = [
        *(
            threading.Thread(target=long_poller, args=(until, claim_task, polls))
            for _ in range(CLAIM_POLLERS)
        ),
        *(
            threading.Thread(target=long_poller, args=(until, watch_job, polls))
            for _ in range(WATCH_POLLERS)
        ),
        *(
            threading.Thread(target=slow_headers, args=(address(proxy.url), until, through_proxy))
            for _ in range(SLOW_HEADERS)
        ),
        *(
            threading.Thread(target=slow_body, args=(address(proxy.url), stack.tokens.user, until))
            for _ in range(SLOW_BODIES)
        ),
        # gunicorn's own bound, for a client that reaches it without the proxy.
        *(
            threading.Thread(target=slow_headers, args=(address(stack.url), until, direct))
            for _ in range(5)
        ),
    ]
    for thread in threads:
        thread.start()
    time.sleep(1)  # every client connected and sending
    probes = [
        threading.Thread(
            target=probe, args=(f"{proxy.url}/healthz", requests.Session(), until, health)
        ),
        threading.Thread(target=probe, args=(f"{proxy.url}/api/v1/jobs", user, until, job_list)),
        threading.Thread(
            target=probe, args=(f"{stack.url}/healthz", requests.Session(), until, direct_health)
        ),
    ]
    for thread in probes:
        thread.start()
    for thread in probes + threads:
        thread.join(timeout=LOAD_SECONDS + POLL_SECONDS + 30)
    assert not any(t.is_alive() for t in probes + threads)

    print(
        f"\nunder {CLAIM_POLLERS + WATCH_POLLERS} long polls, {SLOW_HEADERS} slow-header and "
        f"{SLOW_BODIES} slow-body clients via nginx, 5 slow-header clients direct:"
        f"\n  /healthz via nginx      {figures(health)}"
        f"\n  /api/v1/jobs via nginx  {figures(job_list)}"
        f"\n  /healthz direct         {figures(direct_health)}"
        f"\n  long polls: {sum(1 for _, o in polls if o == 'refused')} refused, "
        f"{sum(1 for _, o in polls if o != 'refused' and o != 'error')} waited"
        f"\n  slow headers cut after: via nginx {sorted(round(s) for s in through_proxy)} s,"
        f" direct {sorted(round(s, 1) for s in direct)} s"
    )
    for latencies in (health, job_list, direct_health):
        assert all(status == 200 for _, status in latencies)
        assert max(seconds for seconds, _ in latencies) < 1, figures(latencies)
    assert not [o for o in polls if o[0] == "error"]
    waited = [took for status, took in polls if took != "refused"]
    # The budget held 16 long polls at a time to their full wait; the rest were sent away.
    assert sum(1 for took in waited if took >= POLL_SECONDS) >= 16
    assert sum(1 for _, took in polls if took == "refused") >= CLAIM_POLLERS + WATCH_POLLERS - 16
    # nginx hangs up on a slow-header client after client_header_timeout (10 s), and gunicorn
    # on a direct one 10 s after its first byte.
    assert len(through_proxy) == SLOW_HEADERS and all(9 <= s <= 14 for s in through_proxy)
    assert len(direct) == 5 and all(9 <= s <= 14 for s in direct), direct


def stalled_upload(target: tuple[str, int], token: str, answers: list) -> None:
    """Send the headers and a tenth of a CSV body, then nothing; note the answer and when."""
    head = (
        f"POST /api/v1/jobs?column=x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: text/csv\r\nContent-Length: 1000\r\n\r\nid,x\n"
    ).encode()
    started = time.monotonic()
    with socket.create_connection(target, timeout=45) as sock:
        sock.sendall(head + b"1,2\n" * 25)
        try:
            answer = sock.recv(65536)
        except TimeoutError:
            answer = b"no answer in 45 s"
    answers.append((time.monotonic() - started, answer.split(b"\r\n", 1)[0]))


def test_gunicorn_alone_gives_idle_connections_no_thread_and_refuses_a_stalled_body(stack, db):
    target = address(stack.url)
    idle = [socket.create_connection(target, timeout=5) for _ in range(100)]
    answers: list = []
    uploader = threading.Thread(target=stalled_upload, args=(target, stack.tokens.user, answers))
    uploader.start()
    latencies: list = []
    try:
        probe(f"{stack.url}/healthz", requests.Session(), time.monotonic() + 4, latencies)
    finally:
        for sock in idle:
            sock.close()
    uploader.join(timeout=60)

    print(f"\n/healthz direct beside 100 idle connections: {figures(latencies)}")
    print(f"stalled body answered after {answers[0][0]:.1f} s: {answers[0][1].decode()}")
    assert max(seconds for seconds, _ in latencies) < 1, figures(latencies)
    [(took, status_line)] = answers
    assert status_line.startswith(b"HTTP/1.1 400")
    assert 29 <= took <= 35
    # The cut body was refused whole, not taken for a CSV of 25 records.
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


def test_a_raw_csv_body_cut_short_by_its_client_is_400_and_admits_nothing(stack, db):
    head = (
        f"POST /api/v1/jobs?column=x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        f"{stack.tokens.user}\r\nContent-Type: text/csv\r\nContent-Length: 1000\r\n\r\nid,x\n"
    ).encode()
    with socket.create_connection(address(stack.url), timeout=20) as sock:
        sock.sendall(head + b"1,2\n" * 25)
        sock.shutdown(socket.SHUT_WR)  # gone after a tenth of the body it announced
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk

    assert answer.startswith(b"HTTP/1.1 400")
    assert b"Content-Length 1000" in answer
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0
