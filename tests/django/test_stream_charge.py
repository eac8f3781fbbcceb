"""A streamed request through the production door on a real Redis: the gate's one road and the one-script enqueue.

One script charges the token, admits and sends a stream; a spent limit answers 429 with the
X-RateLimit headers and queues nothing. The worker is a stub that answers each prompt with
one final token event (its prompt upper-cased).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from models_registry.broker import admission, messages
from models_registry.models import ApiToken, RegisteredModel
from models_registry.policy import auth, gate, serving
from tests import admitting
from tests.asgi_client import AsyncClient
from tests.django import stub_generator

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens", "broker", "within_one_minute")]

CHANNEL = messages.model_channel("gpt")


@pytest.fixture
def gpt(make_model: Callable[..., RegisteredModel], monkeypatch: pytest.MonkeyPatch) -> RegisteredModel:
    """A text-generation model a (stub) worker serves."""

    def serves(spec: Any, task: str, wire: str, workers: Any) -> float:
        return 0.0

    monkeypatch.setattr(serving, "serving_rate", serves)
    return make_model("gpt", task="text-generation")


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, bool, bool]]:
    """Every run of the enqueue script, as (charged, admitted, sent)."""
    return admitting.record_runs(monkeypatch)


@pytest.fixture
async def worker() -> AsyncIterator[list[dict[str, Any]]]:
    """A stub worker on the broker: every request it pulls, answered with one final token event."""
    layer = get_channel_layer()
    pulled: list[dict[str, Any]] = []

    async def serve() -> None:
        while True:
            found = await layer.pull([CHANNEL], "w1", 10)
            if not found:
                await asyncio.sleep(0.01)
            for _, message, _ in found:
                request = messages.WorkRequest.from_wire(message)
                assert request is not None
                pulled.append(message)
                text = request.inputs[0].upper() or "HI"
                events = stub_generator.piece_events([text], "eos_token", 2)
                await layer.send(request.reply, messages.TokenEvents(id=request.id, seq=0, events=events,
                                                                     source="w1").to_wire())

    task = asyncio.ensure_future(serve())
    yield pulled
    task.cancel()


async def post(path: str, body: Any, token: str) -> Any:
    return await AsyncClient().post(path, data=json.dumps(body), content_type="application/json",
                                    headers={"Authorization": f"Bearer {token}"})


async def test_a_stream_is_charged_admitted_and_sent_by_one_script(
        gpt: RegisteredModel, make_token: Callable[..., str], runs: list[tuple[bool, bool, bool]],
        worker: list[dict[str, Any]]) -> None:
    token = await sync_to_async(make_token)("five", requests_per_minute=5)
    response = await post("/models/gpt", {"inputs": "once", "stream": True}, token)
    assert response.status_code == 200, response.content
    body = b"".join([chunk async for chunk in response.streaming_content])
    assert b'"generated_text":"ONCE"' in body
    assert runs == [(True, True, True)]  # the charge, the admission and the send: one round trip
    assert response["X-RateLimit-Limit"] == "5" and response["X-RateLimit-Remaining"] == "4"
    assert len(worker) == 1


async def test_the_choices_of_a_request_are_charged_once(
        gpt: RegisteredModel, make_token: Callable[..., str], runs: list[tuple[bool, bool, bool]],
        worker: list[dict[str, Any]]) -> None:
    token = await sync_to_async(make_token)("two", requests_per_minute=2)
    response = await post("/v1/completions", {"model": "gpt", "prompt": "once", "n": 3}, token)
    assert response.status_code == 200, response.content
    assert [choice["text"] for choice in response.json()["choices"]] == ["ONCE"] * 3
    assert runs == [(True, True, True), (False, True, True), (False, True, True)]
    assert response["X-RateLimit-Remaining"] == "1"  # one request, whatever its choices


async def test_a_stream_past_the_limit_is_429_with_its_headers_and_nothing_queued(
        gpt: RegisteredModel, make_token: Callable[..., str], runs: list[tuple[bool, bool, bool]]) -> None:
    token = await sync_to_async(make_token)("tight", requests_per_minute=1)
    grant = await auth.authorize(f"Bearer {token}", None)
    gate.count_alone(await gate.admit(gate.Ask(grant, [])))  # the minute's one request (the charge alone)
    for path, body in (("/models/gpt", {"inputs": "once", "stream": True}),
                       ("/v1/chat/completions", {"model": "gpt", "messages": [{"role": "user", "content": "hi"}],
                                                 "stream": True, "n": 2})):
        refused = await post(path, body, token)
        assert refused.status_code == 429, refused.content
        assert "requests_per_minute is 1" in refused.content.decode()
        assert refused["Retry-After"] == refused["X-RateLimit-Reset"]
        assert refused["X-RateLimit-Limit"] == "1" and refused["X-RateLimit-Remaining"] == "0"
    assert runs == [(True, False, False), (True, True, True), (True, True, True)]  # no other choice was sent
    layer = get_channel_layer()
    assert await layer.pull([CHANNEL], "w1", 10) == []
    assert await admission.depth(layer, "gpt", "text-generation") == 0
    metrics = (await AsyncClient().get("/metrics")).content.decode()
    label = f"id:{(await ApiToken.objects.aget(name='tight')).id}"
    assert f'hosting_rate_limited_total{{limit="rate",token="{label}"}} 2.0' in metrics
    assert f'hosting_token_requests_total{{token="{label}"}} 1.0' in metrics
