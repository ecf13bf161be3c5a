"""The worker's HTTP session reads the environment's settings for the coordinator once."""

from __future__ import annotations

import requests

from worker_cli.client import CoordinatorClient, settled_session

URL = "http://coordinator.example:8000"


def test_a_proxy_named_in_the_environment_is_used(monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert settled_session(URL).proxies["http"] == "http://proxy.example:3128"


def test_no_proxy_naming_the_coordinator_keeps_calls_direct(monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "coordinator.example")
    assert "http" not in settled_session(URL).proxies


def test_a_ca_bundle_named_in_the_environment_is_verified_against(monkeypatch):
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/internal-ca.pem")
    assert settled_session("https://coordinator.example").verify == "/etc/ssl/internal-ca.pem"


def test_the_environment_is_not_read_again_per_call(monkeypatch):
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    monkeypatch.delenv("http_proxy", raising=False)
    session = settled_session(URL)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    settings = session.merge_environment_settings(URL, {}, None, None, None)
    assert "http" not in settings["proxies"]


def test_netrc_credentials_never_replace_the_bearer_token(monkeypatch, tmp_path):
    netrc = tmp_path / ".netrc"
    netrc.write_text("machine coordinator.example login someone password secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    client = CoordinatorClient(URL, "cw_token")
    prepared = client.session.prepare_request(requests.Request("GET", f"{URL}/healthz"))
    assert prepared.headers["Authorization"] == "Bearer cw_token"
