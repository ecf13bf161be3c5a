"""The floor for the idle pickup: a bare WSGI app doing the least a pickup can, on gunicorn.

`make bench-queue` serves it beside the coordinator and times its pickup in the same turns:
POST /submit inserts a row into floor_tasks (the benchmark creates it) and sends a NOTIFY in
one statement; POST /claim takes a pending row in one statement, or waits for a NOTIFY
(heard by a LISTEN thread, as the coordinator hears them) and tries again. No framework, no
validation, no bookkeeping: what is left is the HTTP, the two commits and the wake-ups, on
the same server and the same gunicorn worker class.
"""

from __future__ import annotations

import json
import os
import threading
import time

import psycopg
from psycopg_pool import ConnectionPool

URL = os.environ["FLOOR_DATABASE_URL"]
SUBMIT = (
    "WITH t AS (INSERT INTO floor_tasks (taken) VALUES (false) RETURNING id) "
    "SELECT pg_notify('floor', id::text) FROM t"
)
CLAIM = (
    "UPDATE floor_tasks SET taken = true WHERE id = (SELECT id FROM floor_tasks "
    "WHERE NOT taken ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id"
)

pool = ConnectionPool(URL, min_size=4, max_size=8, kwargs={"autocommit": True}, open=True)
heard = threading.Condition()
notices = 0


def listen() -> None:
    """Count NOTIFYs and wake the waiting claims."""
    global notices
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute("LISTEN floor")
        for _ in conn.notifies():
            with heard:
                notices += 1
                heard.notify_all()


def claim(wait_seconds: float) -> list[int]:
    """Take one pending row, waiting up to wait_seconds for one to be submitted."""
    deadline = time.monotonic() + wait_seconds
    while True:
        with heard:
            seen = notices
        with pool.connection() as conn:
            row = conn.execute(CLAIM).fetchone()
        left = deadline - time.monotonic()
        if row or left <= 0:
            return [row[0]] if row else []
        with heard:
            heard.wait_for(lambda seen=seen: notices != seen, timeout=min(1.0, left))


def app(environ, start_response):
    """/submit, /claim ({"wait_seconds": n}) and anything else as a health check."""
    body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    path = environ["PATH_INFO"]
    if path == "/submit":
        with pool.connection() as conn:
            conn.execute(SUBMIT)
        answer: object = {"submitted": True}
    elif path == "/claim":
        answer = {"tasks": claim(float(json.loads(body).get("wait_seconds", 0)))}
    else:
        answer = {"ok": True}
    data = json.dumps(answer).encode()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
    start_response("200 OK", headers)
    return [data]


threading.Thread(target=listen, name="floor-listen", daemon=True).start()
