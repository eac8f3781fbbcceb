"""What callers without the operator's token see of the fleet: /ready names no model, GET /models no machine."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from models_registry.models import RegisteredModel

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens")]

SERVED = {"state": "ready", "device": "cpu", "tasks": ["text-classification"], "memory_bytes": 2**20,
          "served": {"text-classification": 1234}, "loads": 3, "evictions": 1}


@pytest.fixture
def fleet(make_model: Callable[..., RegisteredModel], heartbeat: Callable[..., Any], settings: Any) -> dict[str, Any]:
    """Two models served by one live worker; an operator token configured."""
    settings.HOSTING_METRICS_TOKEN = "operator-secret"
    models = {"acme-private": make_model("acme-private"), "globex-private": make_model("globex-private")}
    heartbeat({"acme-private": SERVED, "globex-private": SERVED})
    return models


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_ready_names_no_model_to_anonymous_callers(fleet: dict[str, Any]) -> None:
    response = await AsyncClient().get("/ready")
    text = response.content.decode()
    assert "acme-private" not in text and "globex-private" not in text
    checks = response.json()["checks"]
    assert checks["workers_alive"] == 1 and checks["models_ready_count"] == 2  # what a load balancer needs


async def test_ready_names_no_model_to_a_bad_token(fleet: dict[str, Any]) -> None:
    response = await AsyncClient().get("/ready", headers=bearer("not-a-token"))
    assert "acme-private" not in response.content.decode() and response.status_code in (200, 503)


async def test_ready_names_only_a_scoped_tokens_models(fleet: dict[str, Any], make_token: Callable[..., str]) -> None:
    raw = await sync_to_async(make_token)("acme", models=[fleet["acme-private"]])
    checks = (await AsyncClient().get("/ready", headers=bearer(raw))).json()["checks"]
    assert checks["models_ready"] == ["acme-private"]


async def test_ready_names_every_model_to_the_operator(fleet: dict[str, Any]) -> None:
    checks = (await AsyncClient().get("/ready", headers=bearer("operator-secret"))).json()["checks"]
    assert checks["models_ready"] == ["acme-private", "globex-private"]


async def test_model_detail_shows_an_api_token_no_worker_memory_or_traffic(
        fleet: dict[str, Any], make_token: Callable[..., str]) -> None:
    raw = await sync_to_async(make_token)("everything")  # allowed every model, still not the operator
    response = await AsyncClient().get("/models/acme-private", headers=bearer(raw))
    body = response.json()
    assert response.status_code == 200 and body["workers"] and body["loaded_workers"] == 1
    text = response.content.decode()
    for leaked in ("test-host", "4242", "served_items", "1234", "evictions", "loaded_on"):
        assert leaked not in text, leaked
    listed = (await AsyncClient().get("/models", headers=bearer(raw))).content.decode()
    assert "test-host" not in listed and "4242" not in listed


async def test_model_detail_shows_the_operator_the_workers(fleet: dict[str, Any]) -> None:
    body = (await AsyncClient().get("/models/acme-private", headers=bearer("operator-secret"))).json()
    worker = body["workers"][0]
    assert worker["worker"] == "test-host:4242" and worker["served_items"] == {"text-classification": 1234}
    assert worker["loads"] == 3 and body["loaded_on"] == ["test-host:4242"]
