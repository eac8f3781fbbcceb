"""Streamed traffic and /v1 generation meet canary and shadow versions too (catalog.rollout.pick, policy.shadow).

A stub worker on the broker answers each version's channel with its own text ("v2:PROMPT"),
so the answer says which version generated it, and the pulled requests say who was asked.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.core.management import call_command

from models_registry.broker import messages
from models_registry.catalog import lookups, version_changes
from models_registry.models import RegisteredModel
from models_registry.policy import serving, shadow
from tests.asgi_client import AsyncClient
from tests.django import stub_generator

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("broker")]

CHAT = {"model": "gpt", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.fixture
def open_api(settings: Any) -> None:
    settings.HOSTING_REQUIRE_API_TOKEN = False


@pytest.fixture
def gpt(make_model: Callable[..., RegisteredModel], monkeypatch: pytest.MonkeyPatch) -> RegisteredModel:
    """A text-generation model with its live version 1."""
    monkeypatch.setattr(serving, "serving_rate", lambda spec, task, wire, workers: 0.0)
    model = make_model("gpt", task="text-generation")
    version_changes.record(model)
    return model


def register(*args: str) -> None:
    call_command("register_model", "gpt", "--task", "text-generation", *args, stdout=io.StringIO())


@pytest.fixture
async def worker() -> AsyncIterator[list[tuple[str, dict[str, Any]]]]:
    """A stub worker serving every version's channel: (channel, request) per request it pulls."""
    layer = get_channel_layer()
    pulled: list[tuple[str, dict[str, Any]]] = []

    async def serve() -> None:
        while True:
            for version in (1, 2, 3):
                channel = messages.model_channel(f"gpt.v{version}")
                for _, message, _ in await layer.pull([channel], "w1", 10):
                    request = messages.WorkRequest.from_wire(message)
                    assert request is not None
                    pulled.append((channel, message))
                    text = f"v{version}:{(request.inputs[0] or 'chat').upper()}"
                    events = stub_generator.piece_events([text], "eos_token", 2)
                    await layer.send(request.reply, messages.TokenEvents(id=request.id, seq=0, events=events,
                                                                         source="w1").to_wire())
            await asyncio.sleep(0.01)

    task = asyncio.ensure_future(serve())
    yield pulled
    task.cancel()


async def ready(heartbeat: Callable[..., Any], *versions: int) -> None:
    await sync_to_async(heartbeat)({f"gpt.v{v}": {"state": "ready", "tasks": ["text-generation"]} for v in versions})
    lookups.reset()


async def test_a_canary_generates_its_share_of_streams_and_says_so(
        gpt: RegisteredModel, heartbeat: Callable[..., Any], worker: list[tuple[str, dict[str, Any]]],
        open_api: None) -> None:
    await sync_to_async(register)("--source", "example/gpt-two", "--canary", "100")
    await ready(heartbeat, 1, 2)
    client = AsyncClient()
    response = await client.post("/v1/chat/completions", data=json.dumps({**CHAT, "stream": True}),
                                 content_type="application/json")
    body = b"".join([chunk async for chunk in response.streaming_content]).decode()
    assert response.status_code == 200 and response["X-Model-Version"] == "2" and "v2:CHAT" in body
    whole = await client.post("/v1/completions", data=json.dumps({"model": "gpt", "prompt": "a", "n": 2}),
                              content_type="application/json")
    assert [c["text"] for c in whole.json()["choices"]] == ["v2:A", "v2:A"] and whole["X-Model-Version"] == "2"
    tgi = await client.post("/models/gpt", data=json.dumps({"inputs": "b", "stream": True}),
                            content_type="application/json")
    assert b"v2:B" in b"".join([chunk async for chunk in tgi.streaming_content])
    assert {channel for channel, _ in worker} == {messages.model_channel("gpt.v2")}


async def test_a_shadow_gets_a_copy_of_streams_after_live_answered(
        gpt: RegisteredModel, heartbeat: Callable[..., Any], worker: list[tuple[str, dict[str, Any]]],
        open_api: None) -> None:
    await sync_to_async(register)("--source", "example/gpt-three", "--shadow", "100")
    await ready(heartbeat, 1, 2)
    response = await AsyncClient().post("/v1/chat/completions", data=json.dumps({**CHAT, "stream": True}),
                                        content_type="application/json")
    body = b"".join([chunk async for chunk in response.streaming_content]).decode()
    assert response["X-Model-Version"] == "1" and "v1:CHAT" in body and "v2" not in body  # live alone answers
    for _ in range(200):
        if len(worker) == 2 and not shadow._background:
            break
        await asyncio.sleep(0.02)
    (live_channel, live), (copy_channel, copy) = worker
    assert live_channel == messages.model_channel("gpt.v1") and copy_channel == messages.model_channel("gpt.v2")
    assert copy["priority"] == "batch" and copy["parameters"]["messages"] == live["parameters"]["messages"]
    sums = await shadow.read_sums("gpt", 2)
    assert sums["n"] == 1 and sums["mean_distance"] == 1.0  # "v2:CHAT" is not "v1:CHAT"
