"""Separate hosts on this machine: network namespaces joined by a bridge, for the e2e tests.

A `lan` namespace holds a bridge; every host is a network namespace (and, for the processes
run on it, a UTS namespace with the host's name) whose one interface,
eth0, is a veth plugged into that bridge, on the private SUBNET. The root namespace gets no
interface, address nor route, so no packet can leave the namespaces made here; deleting them
takes every veth with them. Names carry this process's pid: a run that died without cleaning
up leaves nothing a later run trips over.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

SUBNET = "10.231.0.0/24"
CLONE_NEWNET = 0x40000000
IP = shutil.which("ip") or "/usr/sbin/ip"
_libc = ctypes.CDLL(None, use_errno=True)


def unavailable() -> str | None:
    """Why this machine cannot make network namespaces, or None when it can (found by trying)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not os.access(IP, os.X_OK):
        return "`ip` (iproute2) is not installed"
    probe = f"cwprobe{os.getpid()}"
    steps = (
        ("netns", "add", probe),
        ("-n", probe, "link", "add", "br0", "type", "bridge"),
        ("-n", probe, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1"),
    )
    try:
        for step in steps:
            made = subprocess.run([IP, *step], capture_output=True, text=True, timeout=10)
            if made.returncode != 0:
                return f"`ip {' '.join(step)}` failed: {made.stderr.strip()}"
        return None
    finally:
        subprocess.run([IP, "netns", "del", probe], capture_output=True, timeout=10)


def _ip(*args: str) -> None:
    subprocess.run([IP, *args], check=True, capture_output=True, timeout=10)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


@dataclass
class Network:
    """Hosts (namespaces with one address each on SUBNET) and the processes run on them."""

    prefix: str = field(default_factory=lambda: f"cwt{os.getpid()}")
    addresses: dict[str, str] = field(default_factory=dict)
    processes: list[subprocess.Popen] = field(default_factory=list)

    def namespace(self, host: str) -> str:
        """The namespace that is `host`."""
        return f"{self.prefix}-{host}"

    def __enter__(self) -> Network:
        lan = self.namespace("lan")
        try:
            _ip("netns", "add", lan)
            _ip("-n", lan, "link", "add", "br0", "type", "bridge")
            _ip("-n", lan, "link", "set", "br0", "up")
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def add_host(self, name: str, address: str) -> str:
        """Make a host with `address` (in SUBNET) on the bridge; return the address."""
        ns, lan = self.namespace(name), self.namespace("lan")
        _ip("netns", "add", ns)
        self.addresses[name] = address
        # The veth is made inside the lan namespace with its far end inside the host: neither
        # end ever appears in the root namespace.
        veth = ("link", "add", "name", name, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("-n", lan, *veth)
        _ip("-n", lan, "link", "set", name, "master", "br0", "up")
        _ip("-n", ns, "addr", "add", f"{address}/{SUBNET.split('/')[1]}", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        return address

    def spawn(
        self, host: str, argv: list[str], *, log: Path, env: dict[str, str], cwd: Path
    ) -> subprocess.Popen:
        """Run argv on `host` in a session of its own, its output appended to `log`."""
        log.parent.mkdir(parents=True, exist_ok=True)
        # A UTS namespace too: the host's name (in coordinator ids and logs) is `host`.
        named = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host, *argv]
        with log.open("ab") as out:
            process = subprocess.Popen(
                [IP, "netns", "exec", self.namespace(host), *named],
                cwd=cwd,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes.append(process)
        return process

    @contextlib.contextmanager
    def inside(self, host: str) -> Iterator[None]:
        """Run the calling thread's new sockets (requests, psycopg, boto3) from `host`."""
        with (
            open("/proc/thread-self/ns/net") as home,
            open(f"/run/netns/{self.namespace(host)}") as there,
        ):
            _setns(there.fileno())
            try:
                yield
            finally:
                _setns(home.fileno())

    def destroy(self) -> None:
        """Stop every process on the hosts (TERM, then KILL), then delete every namespace."""
        # Newest first: workers and coordinators go before the database they talk to.
        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in self.processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        for name in [*self.addresses, "lan"]:
            ns = self.namespace(name)
            # A process that left its session still holds the namespace open: none may outlive it.
            pids = subprocess.run([IP, "netns", "pids", ns], capture_output=True, text=True)
            for pid in pids.stdout.split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run([IP, "netns", "del", ns], capture_output=True)
        self.addresses.clear()
