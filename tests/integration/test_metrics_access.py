"""/metrics names live worker ids, so only the scrape token or an operator's token may read it."""

from __future__ import annotations

import pytest

from tests.integration.csv_worker import settings

SCRAPE_TOKEN = "scrape-" + "s" * 40


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize(
    "authorization", [None, "", "Bearer", "Bearer ", "Basic b3BlcmF0b3I6eA==", "Token x" * 3]
)
def test_a_scrape_without_a_bearer_token_is_refused_with_401(client, authorization):
    request_headers = {} if authorization is None else {"Authorization": authorization}

    response = client.get("/metrics", headers=request_headers)

    assert response.status_code == 401
    error = response.get_json()["error"]
    assert error["code"] == "unauthenticated"
    assert "Authorization" in error["message"]
    assert error["details"] == {"header": "Authorization"}
    assert "chunkwise_" not in response.get_data(as_text=True)


def test_an_unknown_token_is_refused_with_401(client):
    response = client.get("/metrics", headers=bearer("cwu_" + "x" * 43))

    assert response.status_code == 401
    assert response.get_json()["error"]["code"] == "unauthenticated"


@pytest.mark.parametrize("who", ["user", "worker"])
def test_user_and_worker_tokens_may_not_scrape(client, headers, who):
    response = client.get("/metrics", headers=headers[who])

    assert response.status_code == 403
    assert response.get_json()["error"]["code"] == "forbidden"


def test_an_operator_token_may_scrape_when_no_scrape_token_is_set(client, headers):
    response = client.get("/metrics", headers=headers["operator"])

    assert response.status_code == 200
    assert "chunkwise_cluster_active_leases" in response.get_data(as_text=True)


@settings(CHUNKWISE_METRICS_TOKEN=SCRAPE_TOKEN)
def test_the_scrape_token_reads_metrics_and_nothing_else(client, headers):
    scraped = client.get("/metrics", headers=bearer(SCRAPE_TOKEN))
    queue = client.get("/api/v1/queue", headers=bearer(SCRAPE_TOKEN))

    assert scraped.status_code == 200
    assert "chunkwise_cluster_active_leases" in scraped.get_data(as_text=True)
    assert queue.status_code == 401
    assert client.get("/metrics", headers=headers["operator"]).status_code == 200


@settings(CHUNKWISE_METRICS_TOKEN=SCRAPE_TOKEN)
@pytest.mark.parametrize("wrong", [SCRAPE_TOKEN[:-1], SCRAPE_TOKEN + "s", SCRAPE_TOKEN.upper()])
def test_a_near_miss_of_the_scrape_token_is_refused(client, wrong):
    assert client.get("/metrics", headers=bearer(wrong)).status_code == 401
