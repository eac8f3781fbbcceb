"""POST /v1/responses, whole and streamed, and its stored responses, over a stub worker on a real Redis.

The stub answers every request with the same token events: a `<think>` block, text, and a Hermes
call cut across tokens. What is tested is the web side: the chat request that reaches the worker,
the Response items and events, the store per token, GET, DELETE and the expiry sweep.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from models_registry.jobs import retention
from models_registry.models import RegisteredModel, StoredResponse
from models_registry.policy import serving
from tests.asgi_client import AsyncClient
from tests.django import stub_generator

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens", "broker")]

PIECES = ["<think>hmm</think>", "Let me check.\n<tool", "_call>\n{\"name\": \"get_weather\", ",
          "\"arguments\": {\"city\": \"Rome\"}}\n</tool_", "call>"]
WEATHER = {"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture
def models(make_model: Callable[..., RegisteredModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """A chat model whose files say hermes and think."""
    monkeypatch.setattr(serving, "serving_rate", lambda spec, task, wire, workers: 0.0)
    make_model("qwen", task="text-generation", file_settings={"reasoning_format": "think",
                                                               "tool_call_format": "hermes"})


@pytest.fixture
async def worker(models: None) -> AsyncIterator[list[dict[str, Any]]]:
    """A stub worker pulling the model's channel: PIECES as token events, the last with TGI's details."""
    async with stub_generator.generating(["qwen"], PIECES) as pulled:
        yield pulled


@pytest.fixture
def tokens(make_token: Callable[..., str], models: None) -> tuple[str, str]:
    return make_token("one"), make_token("two")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def create(token: str, body: dict[str, Any]) -> Any:
    return await AsyncClient().post("/v1/responses", data=json.dumps(body), content_type="application/json",
                                    headers=bearer(token))


async def test_the_whole_answer_has_reasoning_message_and_call_items(tokens: tuple[str, str],
                                                                     worker: list[dict[str, Any]]) -> None:
    response = await create(tokens[0], {"model": "qwen", "input": "Weather in Rome?", "instructions": "Be brief.",
                                        "tools": [WEATHER], "max_output_tokens": 50})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["object"] == "response" and body["id"].startswith("resp_") and body["status"] == "completed"
    assert [item["type"] for item in body["output"]] == ["reasoning", "message", "function_call"]
    assert body["output"][0]["content"][0]["text"] == "hmm"
    assert body["output"][1]["content"] == [{"type": "output_text", "text": "Let me check.", "annotations": []}]
    call = body["output"][2]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Rome"}
    assert body["usage"]["input_tokens"] == 9 and body["usage"]["total_tokens"] == 14
    assert body["instructions"] == "Be brief." and body["tools"] == [WEATHER] and body["max_output_tokens"] == 50
    parameters = worker[0]["parameters"]
    assert parameters["messages"] == [{"role": "system", "content": "Be brief."},
                                      {"role": "user", "content": "Weather in Rome?"}]
    assert parameters["tools"] == [{"type": "function", "function": {"name": "get_weather",
                                                                     "parameters": WEATHER["parameters"]}}]
    assert parameters["max_new_tokens"] == 50


async def test_the_stream_sends_typed_events_in_sequence(tokens: tuple[str, str],
                                                         worker: list[dict[str, Any]]) -> None:
    response = await create(tokens[0], {"model": "qwen", "input": "Hi", "tools": [WEATHER], "stream": True})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/event-stream")
    text = b"".join([chunk async for chunk in response.streaming_content]).decode()
    blocks = [block.split("\n") for block in text.split("\n\n") if block]
    events = [json.loads(lines[1][6:]) for lines in blocks]
    assert all(lines[0] == f"event: {e['type']}" for lines, e in zip(blocks, events, strict=True))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert "response.reasoning_text.delta" in kinds and "response.function_call_arguments.done" in kinds
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == "Let me check." == events[-1]["response"]["output"][1]["content"][0]["text"]


async def test_a_stored_response_is_its_tokens_alone_and_continues(tokens: tuple[str, str],
                                                                   worker: list[dict[str, Any]]) -> None:
    mine, theirs = tokens
    first = (await create(mine, {"model": "qwen", "input": "Hi", "tools": [WEATHER]})).json()
    got = await AsyncClient().get(f"/v1/responses/{first['id']}", headers=bearer(mine))
    assert got.status_code == 200 and got.json()["output"] == first["output"]
    other = await AsyncClient().get(f"/v1/responses/{first['id']}", headers=bearer(theirs))
    assert other.status_code == 404 and other.json()["error"]["code"] == "not_found"
    refused = await create(theirs, {"model": "qwen", "input": "and?", "previous_response_id": first["id"]})
    assert refused.status_code == 404 and len(worker) == 1  # nothing reached the worker
    call = first["output"][2]
    second = await create(mine, {"model": "qwen", "previous_response_id": first["id"], "tools": [WEATHER], "input": [
        {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}]})
    assert second.status_code == 200, second.content
    assert second.json()["previous_response_id"] == first["id"]
    sent = worker[-1]["parameters"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["content"] == "Let me check." and sent[1]["tool_calls"][0]["id"] == call["call_id"]
    assert sent[2] == {"role": "tool", "content": "sunny", "tool_call_id": call["call_id"], "name": "get_weather"}
    assert (await AsyncClient().delete(f"/v1/responses/{first['id']}", headers=bearer(theirs))).status_code == 404
    deleted = await AsyncClient().delete(f"/v1/responses/{first['id']}", headers=bearer(mine))
    assert deleted.json() == {"id": first["id"], "object": "response", "deleted": True}
    assert (await AsyncClient().get(f"/v1/responses/{first['id']}", headers=bearer(mine))).status_code == 404


async def test_store_false_keeps_nothing_and_a_bad_field_is_named(tokens: tuple[str, str],
                                                                  worker: list[dict[str, Any]]) -> None:
    body = (await create(tokens[0], {"model": "qwen", "input": "Hi", "store": False})).json()
    assert body["store"] is False
    assert (await AsyncClient().get(f"/v1/responses/{body['id']}", headers=bearer(tokens[0]))).status_code == 404
    bad = await create(tokens[0], {"model": "qwen", "input": "Hi", "max_output_tokens": 0})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "max_output_tokens"


async def test_an_expired_response_is_hidden_then_swept(tokens: tuple[str, str], worker: list[dict[str, Any]]) -> None:
    body = (await create(tokens[0], {"model": "qwen", "input": "Hi"})).json()
    stored = await StoredResponse.objects.aget(public_id=body["id"])
    assert stored.expires_at is not None and stored.conversation[0] == {"type": "message", "role": "user",
                                                                         "content": "Hi"}
    await StoredResponse.objects.filter(id=stored.id).aupdate(expires_at=timezone.now() - timedelta(seconds=1))
    assert (await AsyncClient().get(f"/v1/responses/{body['id']}", headers=bearer(tokens[0]))).status_code == 404
    assert await sync_to_async(retention.sweep)() == 1
    assert not await StoredResponse.objects.filter(id=stored.id).aexists()
