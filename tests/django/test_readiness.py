"""GET /ready over worker heartbeats: 200 only when every enabled model the live workers are meant to serve is
ready on one of them (or loadable on demand), and "is loading" never follows a 200 for a model it counted."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from models_registry.catalog import lookups
from models_registry.core.errors import Unavailable
from models_registry.models import RegisteredModel, WorkerHeartbeat
from models_registry.policy import serving
from tests.asgi_client import AsyncClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens", "broker")]

OPERATOR = {"Authorization": "Bearer operator-secret"}
READY, LOADING = {"state": "ready"}, {"state": "loading"}


@pytest.fixture
def three(make_model: Callable[..., RegisteredModel], settings: Any) -> list[str]:
    """Three enabled models (the issue's restart), and the operator's token, which sees their names."""
    settings.HOSTING_METRICS_TOKEN = "operator-secret"
    for name in ("alpha", "beta", "gamma"):
        make_model(name)
    return ["alpha", "beta", "gamma"]


async def ready(headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    """/ready's status and JSON, read afresh (no cached view of the workers)."""
    lookups.reset()
    response = await AsyncClient().get("/ready", headers=OPERATOR if headers is None else headers)
    return response.status_code, response.json()


async def test_a_restart_is_not_ready_until_every_model_is(three: list[str], heartbeat: Callable[..., Any]) -> None:
    first = await sync_to_async(heartbeat)({})  # its first beat, before it has read the registry
    status, body = await ready()
    assert status == 503 and body["checks"]["models_not_ready"] == three
    await sync_to_async(WorkerHeartbeat.objects.filter(pk=first.pk).update)(
        models_state={"alpha": READY, "beta": LOADING, "gamma": LOADING})
    status, body = await ready()
    assert status == 503, body
    assert body["checks"]["models_ready"] == ["alpha"] and body["checks"]["models_not_ready"] == ["beta", "gamma"]
    assert any("models_not_ready" in why for why in body["missing"])
    status, body = await ready(headers={})  # a load balancer: the verdict and the counts, no names
    assert status == 503 and body["checks"]["models_not_ready_count"] == 2 and "beta" not in str(body)
    await sync_to_async(WorkerHeartbeat.objects.filter(pk=first.pk).update)(
        models_state={"alpha": READY, "beta": READY, "gamma": READY})
    status, body = await ready()
    assert status == 200 and body["checks"]["models_ready"] == three and body["missing"] == []


async def test_a_model_no_live_worker_is_meant_to_serve_is_listed_not_waited_for(
        three: list[str], heartbeat: Callable[..., Any]) -> None:
    await sync_to_async(heartbeat)({"alpha": READY}, serve_models=["alpha"])
    status, body = await ready()
    assert status == 200 and body["checks"]["models_not_served"] == ["beta", "gamma"]
    await sync_to_async(heartbeat)({"beta": LOADING}, worker_id="w2", serve_models=["beta"])  # beta's worker starts
    status, body = await ready()
    assert status == 503 and body["checks"]["models_not_ready"] == ["beta"]


async def test_a_model_that_failed_to_load_everywhere_holds_readiness(three: list[str],
                                                                      heartbeat: Callable[..., Any]) -> None:
    await sync_to_async(heartbeat)({"alpha": READY, "beta": READY, "gamma": {"state": "error", "error": "gone"}})
    status, body = await ready()
    assert status == 503 and body["checks"]["models_not_ready"] == ["gamma"]
    await RegisteredModel.objects.filter(name="gamma").aupdate(enabled=False)  # what the operator does about it
    assert (await ready())[0] == 200


STATES = [None, READY, LOADING, {"state": "loading", "on_demand": True}, {"state": "available"},
          {"state": "error", "error": "x"}]


async def test_is_loading_never_follows_a_ready_answer_for_a_model_it_counted(
        make_model: Callable[..., RegisteredModel], heartbeat: Callable[..., Any]) -> None:
    """Every state two workers (one of them possibly draining) can report of a model beside one ready: where /ready
    is 200, the hand-off's refusal (policy.serving: 503 "is loading", "no live worker serves") answers neither."""
    await sync_to_async(make_model)("m")
    await sync_to_async(make_model)("n")  # ready on w1 throughout: before, enough for a 200
    answered = set()
    for first, second, draining in itertools.product(STATES, STATES, (False, True)):
        await WorkerHeartbeat.objects.all().adelete()
        for worker_id, state, drains in (("w1", first, False), ("w2", second, draining)):
            reports = {"m": state} if state else {}
            await sync_to_async(heartbeat)(reports | ({"n": READY} if worker_id == "w1" else {}), worker_id=worker_id,
                                           draining=drains)
        status, _ = await ready()
        answered.add(status)
        if status != 200:
            continue
        specs, view = await lookups.get_specs(), await lookups.get_workers()
        for name in ("m", "n"):
            try:
                serving.serving_rate(specs[name], "text-classification", "", view)
            except Unavailable as error:
                raise AssertionError(f"/ready was 200 with w1 {first}, w2 {second} (draining {draining}): {error}")
    assert answered == {200, 503}
