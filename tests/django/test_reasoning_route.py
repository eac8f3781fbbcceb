"""reasoning_content on POST /v1/chat/completions, whole and streamed, over a stub worker on a real Redis.

The stub answers every request with the same token events, its `<think>` block's tags cut across
tokens; what is tested is the web side: the split, the deltas, usage and the ledger's count.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import jsonschema_rs
import pytest
import redis
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from models_registry.api.openapi import openapi
from models_registry.broker import deferred
from models_registry.models import RegisteredModel, UsageRecord
from models_registry.observe import ledger_flush
from models_registry.policy import serving
from tests.asgi_client import AsyncClient
from tests.django import stub_generator

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens", "broker")]

PIECES = ["\nLet me", " see.\n</th", "ink>\n\nPar", "is."]  # the prompt opened the block (think-open)
CHAT = {"messages": [{"role": "user", "content": "Capital of France?"}], "max_tokens": 4}


@pytest.fixture
def models(make_model: Callable[..., RegisteredModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """Three chat models a stub worker serves: set to think-open, switched off, and said by their files."""
    monkeypatch.setattr(serving, "serving_rate", lambda spec, task, wire, workers: 0.0)
    make_model("r1", task="text-generation", parameters={"reasoning_format": "think-open"})
    make_model("plain", task="text-generation", parameters={"reasoning_format": "none"})
    make_model("files", task="text-generation", file_settings={"reasoning_format": "think-open"})


@pytest.fixture
async def worker(models: None) -> AsyncIterator[list[dict[str, Any]]]:
    """A stub worker pulling every model's channel: PIECES as token events, the last with TGI's details."""
    async with stub_generator.generating(["r1", "plain", "files"], PIECES, finish_reason="length", input_length=7) as pulled:
        yield pulled


@pytest.fixture
def token(make_token: Callable[..., str], models: None) -> str:
    return make_token("all")


async def chat(token: str, body: dict[str, Any]) -> Any:
    return await AsyncClient().post("/v1/chat/completions", data=json.dumps(body), content_type="application/json",
                                    headers={"Authorization": f"Bearer {token}"})


@pytest.mark.parametrize("model", ["r1", "files"])
async def test_the_whole_answer_has_reasoning_content_apart(token: str, worker: list[dict[str, Any]],
                                                            model: str) -> None:
    response = await chat(token, {"model": model, **CHAT})
    assert response.status_code == 200, response.content
    answer = response.json()
    assert answer["choices"][0]["message"] == {"role": "assistant", "content": "Paris.",
                                               "reasoning_content": "Let me see."}
    assert answer["choices"][0]["finish_reason"] == "length"
    # every generated token counts, the reasoning's too; max_tokens is the worker's max_new_tokens for both
    assert answer["usage"] == {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11}
    assert worker[0]["parameters"]["max_new_tokens"] == 4


async def test_the_stream_sends_reasoning_deltas_then_content_deltas(token: str, worker: list[dict[str, Any]]) -> None:
    response = await chat(token, {"model": "r1", **CHAT, "stream": True, "stream_options": {"include_usage": True}})
    assert response.status_code == 200
    body = b"".join([chunk async for chunk in response.streaming_content]).decode()
    chunks = [json.loads(line[6:]) for line in body.split("\n\n") if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    said = [(k, v) for d in deltas for k, v in d.items() if k in ("reasoning_content", "content") and v]
    assert said == [("reasoning_content", "Let me"), ("reasoning_content", " see."), ("content", "Par"),
                    ("content", "is.")]
    assert chunks[-1]["usage"] == {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11}
    assert body.endswith("data: [DONE]\n\n")


async def test_reasoning_switched_off_leaves_the_text_in_content(token: str, worker: list[dict[str, Any]]) -> None:
    response = await chat(token, {"model": "plain", **CHAT})
    assert response.json()["choices"][0]["message"] == {"role": "assistant", "content": "".join(PIECES)}


async def test_completions_are_not_split(token: str, worker: list[dict[str, Any]]) -> None:
    response = await AsyncClient().post("/v1/completions", data=json.dumps({"model": "r1", "prompt": "a"}),
                                        content_type="application/json", headers={"Authorization": f"Bearer {token}"})
    assert response.json()["choices"][0]["text"] == "".join(PIECES)


async def test_the_ledger_counts_the_reasoning_tokens(token: str, worker: list[dict[str, Any]], broker: str) -> None:
    await chat(token, {"model": "r1", **CHAT})
    streamed = await chat(token, {"model": "r1", **CHAT, "stream": True})
    assert b"[DONE]" in b"".join([chunk async for chunk in streamed.streaming_content])  # counted once it ends
    while not deferred.writes.idle:
        await asyncio.sleep(0.005)
    await sync_to_async(ledger_flush.flush)(redis.Redis.from_url(broker), get_channel_layer().prefix, 10.0)
    [row] = await sync_to_async(list)(UsageRecord.objects.filter(model="r1").values("requests", "output_tokens"))
    assert row == {"requests": 2, "output_tokens": 8}


def test_the_document_describes_reasoning_content() -> None:
    doc = openapi.build_schema(4)
    message = doc["components"]["schemas"]["AssistantMessage"]
    assert "reasoning_content" in message["properties"] and "reasoning_content" not in message["required"]
    assert '"delta": {"reasoning_content"}' in doc["paths"]["/v1/chat/completions"]["post"]["description"]
    answer = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "r1",
              "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris.", "reasoning_content": "Hm"},
                           "logprobs": None, "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}
    schema = doc["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    validator = jsonschema_rs.validator_for({**schema, "components": doc["components"]})
    assert validator.is_valid(answer)
    answer["choices"][0]["message"]["reasoning_content"] = 7
    assert not validator.is_valid(answer)


@pytest.mark.parametrize(("model", "said"), [("r1", {"value": "think-open", "from": "registration"}),
                                             ("files", {"value": "think-open", "from": "files"}),
                                             ("plain", {"value": "none", "from": "registration"})])
async def test_the_model_detail_says_the_format_and_where_it_came_from(token: str, model: str,
                                                                       said: dict[str, str]) -> None:
    detail = (await AsyncClient().get(f"/models/{model}", headers={"Authorization": f"Bearer {token}"})).json()
    assert detail["tasks"][0]["settings"]["reasoning_format"] == said
