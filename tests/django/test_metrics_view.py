"""GET /metrics: open by default, behind HOSTING_METRICS_TOKEN when set."""

from __future__ import annotations

from typing import Any

from django.test import Client


def test_metrics_are_open_without_a_configured_token(client: Client, settings: Any) -> None:
    settings.HOSTING_METRICS_TOKEN = ""
    response = client.get("/metrics")
    assert response.status_code == 200
    assert b"hosting_workers_alive" in response.content


def test_metrics_token_is_required_when_configured(client: Client, settings: Any) -> None:
    settings.HOSTING_METRICS_TOKEN = "scrape-secret"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").json()["error_type"] == "unauthorized"
    ok = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret")
    assert ok.status_code == 200 and b"hosting_inference_requests" in ok.content
