"""What every system in the peer bench is, and why one may be skipped."""

from __future__ import annotations

import importlib
import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from bench.peers.figures import Drain, Row
from devstack.stack import REPO


class Unavailable(Exception):
    """A peer that cannot run on this machine; the message says why, on one line."""


class Peer(Protocol):
    """A queue the bench drains: started once, drained once a turn, stopped at the end."""

    row: Row

    def start(self) -> None:
        """Start the system's consumers; raise Unavailable when it cannot run here."""

    def drain(self, turn: int, tasks: int, timeout: float) -> Drain:
        """Submit `tasks` no-op tasks and return once all are done, or after `timeout` s."""

    def stop(self) -> None:
        """Stop what start() started and remove what the bench left on shared servers."""


def require_module(name: str) -> None:
    """Raise Unavailable when a peer's package is not installed."""
    try:
        importlib.import_module(name)
    except ImportError as exc:
        raise Unavailable(f"{name} is not installed (pip install -e '.[peers]'): {exc}") from exc


def require_listening(url: str, default_port: int, timeout: float = 2.0) -> None:
    """Raise Unavailable when nothing accepts a TCP connection at the URL's host and port."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or default_port
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise Unavailable(f"nothing answers at {host}:{port} ({exc.strerror or exc})") from exc


def start_available(peers: list[Peer]) -> tuple[list[Peer], list[str]]:
    """Start every peer that can run here; return those started and a line for each skipped."""
    started, skipped = [], []
    for peer in peers:
        try:
            peer.start()
        except Unavailable as exc:
            peer.stop()
            skipped.append(f"{peer.row.system}: skipped, {exc}")
        else:
            started.append(peer)
    return started, skipped


def spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """Start a peer's worker in a session of its own (so its whole group can be stopped), its
    output going to `log`."""
    with log.open("ab") as out:
        return subprocess.Popen(
            argv,
            cwd=REPO,
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_process(process: subprocess.Popen | None, grace: float = 10.0) -> None:
    """SIGTERM a worker's group, SIGKILL it after `grace` seconds."""
    if process is None or process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
