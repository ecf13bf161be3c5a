"""The dashboard's files are served only under /ui/static, with the dashboard's headers."""

from __future__ import annotations

import pytest

FILES = ["ui.css", "ui.js", "favicon.svg"]


@pytest.mark.parametrize("name", FILES)
def test_the_app_wide_static_path_serves_nothing(client, name):
    response = client.get(f"/static/ui/{name}")

    assert response.status_code == 404
    assert response.get_json()["error"]["code"] == "not_found"


@pytest.mark.parametrize("name", FILES)
def test_a_dashboard_file_is_served_under_ui_with_its_security_headers(client, name):
    response = client.get(f"/ui/static/{name}")

    assert response.status_code == 200
    assert response.get_data()
    assert "default-src 'none'" in response.headers["Content-Security-Policy"]
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["X-Frame-Options"] == "DENY"
