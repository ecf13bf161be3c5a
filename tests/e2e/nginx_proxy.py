"""deploy/nginx.conf in front of a local stack: nginx unprivileged, in a directory of its own."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

from devstack.stack import REPO, free_port

SITE = REPO / "deploy" / "nginx.conf"
# What compose.yaml's network calls things, replaced by the local stack's addresses: the
# upstream's servers (compose's coordinators) become the one local coordinator.
UPSTREAM = re.compile(r"^ *server coordinator-\d+:8000\b[^;]*;\n", re.MULTILINE)
LISTEN = "listen 8080;"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def available() -> bool:
    """Whether nginx is installed (.ci/run installs it)."""
    return Path(NGINX).exists()


@dataclass
class NginxProxy:
    """deploy/nginx.conf, unchanged but for its addresses, in front of the coordinator."""

    upstream_port: int
    run_dir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """The proxy's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> None:
        """Write the configuration, start nginx in the foreground, wait until it answers."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        site = SITE.read_text()
        servers = UPSTREAM.findall(site)
        assert servers and LISTEN in site, "deploy/nginx.conf changed its addresses"
        site = site.replace(servers[0], f"    server 127.0.0.1:{self.upstream_port};\n")
        site = UPSTREAM.sub("", site)
        site = site.replace(LISTEN, f"listen 127.0.0.1:{self.port};")
        (self.run_dir / "site.conf").write_text(site)
        (self.run_dir / "nginx.conf").write_text(
            f"""daemon off;
pid {self.run_dir}/nginx.pid;
error_log {self.run_dir}/error.log warn;
worker_processes 1;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {self.run_dir}/body;
    proxy_temp_path {self.run_dir}/proxy;
    fastcgi_temp_path {self.run_dir}/fastcgi;
    uwsgi_temp_path {self.run_dir}/uwsgi;
    scgi_temp_path {self.run_dir}/scgi;
    include {self.run_dir}/site.conf;
}}
"""
        )
        log = (self.run_dir / "stderr.log").open("ab")
        self.process = subprocess.Popen(
            [NGINX, "-p", str(self.run_dir), "-c", str(self.run_dir / "nginx.conf")],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError((self.run_dir / "stderr.log").read_text())
            try:
                requests.get(f"{self.url}/healthz", timeout=2)
                return
            except requests.RequestException:
                time.sleep(0.1)
        raise TimeoutError(f"nginx on {self.url} did not answer in {timeout} s")

    def stop(self) -> None:
        """Stop nginx (SIGTERM: a fast shutdown)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
