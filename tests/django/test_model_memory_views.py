"""Models loadable on demand in /ready, GET /models and the hand-off; memory and placement in the API and /metrics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from models_registry.broker.handoff import InferenceResult
from models_registry.policy import dispatch
from models_registry.catalog import lookups
from models_registry.catalog.served_check import still_served
from tests.asgi_client import AsyncClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens")]

FIT = {"samples": 9, "coefficients": {"constant": 5e6, "items": 0.0, "padded_tokens": 15000.0, "attention": 0.0},
       "max_relative_error": 0.04, "cap_tokens": 4096, "budget_bytes": 2**30, "available_bytes": 2**28,
       "last_batch": {"items": 8, "longest": 128, "measured_bytes": 2e7, "predicted_bytes": 2.1e7}}
HELD = {"state": "ready", "error": "", "device": "cpu", "tasks": ["text-classification"], "memory_bytes": 90 * 2**20,
        "memory": {"text-classification": FIT}, "loads": 3, "evictions": 2, "load_seconds_sum": 1.5,
        "load_seconds_buckets": [0, 0, 1, 3, 3, 3, 3, 3, 3, 3], "recent_load_seconds": [0.3, 0.6, 0.6]}
COLD = {"state": "available", "error": "", "tasks": ["text-classification"], "memory_bytes": 0}


@pytest.fixture
def fleet(make_model: Callable[..., Any], heartbeat: Callable[..., Any]) -> None:
    """Model held is loaded on worker w1; cold is registered and loadable on demand."""
    make_model("held")
    make_model("cold")
    heartbeat({"held": HELD, "cold": COLD})
    lookups.reset()


async def test_ready_lists_models_loadable_on_demand_instead_of_not_served(fleet: None, settings: Any) -> None:
    settings.HOSTING_METRICS_TOKEN = "operator-secret"
    body = (await AsyncClient().get("/ready", headers={"Authorization": "Bearer operator-secret"})).json()
    assert "a live worker serving an enabled model" not in body["missing"], body  # (no broker in this tier)
    assert body["checks"]["models_ready"] == ["held"]
    assert body["checks"]["models_loadable_on_demand"] == ["cold"]
    assert body["checks"]["models_not_served"] == []


async def test_model_list_and_detail_show_state_placement_and_memory(fleet: None, settings: Any) -> None:
    settings.HOSTING_METRICS_TOKEN = "operator-secret"
    headers = {"Authorization": "Bearer operator-secret"}  # the operator sees where models are loaded
    listed = {m["name"]: m for m in (await AsyncClient().get("/models", headers=headers)).json()["models"]}
    assert (listed["cold"]["state"], listed["cold"]["loaded_on"]) == ("available", [])
    assert (listed["held"]["state"], listed["held"]["loaded_on"]) == ("ready", ["test-host:4242"])
    assert listed["held"]["memory_bytes"] == 90 * 2**20
    detail = (await AsyncClient().get("/models/held", headers=headers)).json()
    assert detail["tasks"][0]["memory"]["cap_tokens"] == 4096
    assert detail["tasks"][0]["memory"]["max_relative_error"] == 0.04
    assert (detail["workers"][0]["loads"], detail["workers"][0]["evictions"]) == (3, 2)


async def test_a_request_for_a_model_loadable_on_demand_is_handed_to_the_workers(
        fleet: None, make_token: Callable[..., str], monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:

    seen: list[str] = []

    async def infer(**kwargs: Any) -> InferenceResult:
        seen.append(kwargs["model"])
        assert await still_served(kwargs["served"])  # a worker loads it: the view keeps waiting
        return InferenceResult(outputs=[[{"label": "a", "score": 1.0}]], queue_ms=1.0, compute_ms=1.0, batch_size=1)

    monkeypatch.setattr(dispatch.handoff, "infer", infer)
    settings.HOSTING_RATE_LIMITS = False  # no broker here to run the charge's script
    token = await sync_to_async(make_token)("all")
    response = await AsyncClient().post("/models/cold", data={"inputs": "hello"}, content_type="application/json",
                                        headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.content
    assert seen == ["cold"]


def test_metrics_count_loads_evictions_load_seconds_and_show_the_cap(client: Any, fleet: None) -> None:
    text = client.get("/metrics").content.decode()
    assert 'hosting_model_loads_total{model="held"} 3.0' in text
    assert 'hosting_model_evictions_total{model="held"} 2.0' in text
    assert 'hosting_model_load_seconds_bucket{le="1.0",model="held"} 3.0' in text
    assert 'hosting_model_load_seconds_count{model="held"} 3.0' in text
    assert 'hosting_batch_memory_cap_tokens{model="held",task="text-classification"} 4096.0' in text
    assert 'hosting_batch_memory_predicted_bytes{model="held",task="text-classification"} 2.1e+07' in text
    assert 'hosting_model_memory_bytes{model="held"} 9.437184e+07' in text
