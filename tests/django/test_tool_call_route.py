"""tool_calls on POST /v1/chat/completions, whole and streamed, over a stub worker on a real Redis.

The stub answers every request with the same token events: a `<think>` block that mentions a call,
text, and a Hermes call whose markers are cut across tokens. What is tested is the web side: what
reaches the worker (tools, tool turns, a forced call's grammar), the parse, the deltas, usage, the
ledger's count, and the document.
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

PIECES = ["<think>call <tool_call>{}</tool_call>?</think>", "Let me check.\n<tool",
          "_call>\n{\"name\": \"get_weather\", ", "\"arguments\": {\"city\": \"Rome\"}}\n</tool_", "call>"]
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CHAT = {"messages": [{"role": "user", "content": "Weather in Rome?"}], "max_tokens": 50, "tools": [WEATHER]}


@pytest.fixture
def models(make_model: Callable[..., RegisteredModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """A chat model whose files say hermes and think, and one that reads no tools."""
    monkeypatch.setattr(serving, "serving_rate", lambda spec, task, wire, workers: 0.0)
    make_model("qwen", task="text-generation", file_settings={"reasoning_format": "think",
                                                               "tool_call_format": "hermes"})
    make_model("plain", task="text-generation")


@pytest.fixture
async def worker(models: None) -> AsyncIterator[list[dict[str, Any]]]:
    """A stub worker pulling both models' channels: PIECES as token events, the last with TGI's details."""
    async with stub_generator.generating(["qwen", "plain"], PIECES) as pulled:
        yield pulled


@pytest.fixture
def token(make_token: Callable[..., str], models: None) -> str:
    return make_token("all")


async def chat(token: str, body: dict[str, Any]) -> Any:
    return await AsyncClient().post("/v1/chat/completions", data=json.dumps(body), content_type="application/json",
                                    headers={"Authorization": f"Bearer {token}"})


async def test_the_whole_answer_has_the_call_apart_from_reasoning_and_content(
        token: str, worker: list[dict[str, Any]]) -> None:
    conversation = [*CHAT["messages"], {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "get_weather",
                                                          "arguments": "{\"city\": \"Oslo\"}"}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": "snow"}, {"role": "user", "content": "And Rome?"}]
    response = await chat(token, {"model": "qwen", **CHAT, "messages": conversation})
    assert response.status_code == 200, response.content
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["reasoning_content"] == "call <tool_call>{}</tool_call>?"  # the reasoning is never read for calls
    assert message["content"] == "Let me check."
    [call] = message["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"] == {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}
    parameters = worker[0]["parameters"]
    assert parameters["tools"] == [WEATHER] and "grammar" not in parameters  # auto: free text, parsed
    assert parameters["messages"][1]["tool_calls"][0]["function"]["arguments"] == {"city": "Oslo"}
    assert parameters["messages"][2]["tool_call_id"] == "call_0"
    assert response.json()["usage"] == {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14}


async def test_the_stream_sends_content_then_the_call_in_two_deltas(token: str, worker: list[dict[str, Any]]) -> None:
    response = await chat(token, {"model": "qwen", **CHAT, "stream": True, "stream_options": {"include_usage": True}})
    assert response.status_code == 200
    body = b"".join([chunk async for chunk in response.streaming_content]).decode()
    chunks = [json.loads(line[6:]) for line in body.split("\n\n") if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    content = "".join(d.get("content") or "" for d in deltas)
    assert content == "Let me check." and "<tool" not in content  # the marker's first half was held back
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert calls[0]["function"] == {"name": "get_weather", "arguments": ""} and calls[0]["index"] == 0
    assert calls[0]["type"] == "function" and calls[0]["id"].startswith("call_")
    assert calls[1:] == [{"index": 0, "function": {"arguments": "{\"city\": \"Rome\"}"}}]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]] \
        == ["tool_calls"]
    assert chunks[-1]["usage"] == {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14}


async def test_a_forced_choice_sends_a_grammar_and_none_sends_no_tools(token: str,
                                                                       worker: list[dict[str, Any]]) -> None:
    forced = await chat(token, {"model": "qwen", **CHAT, "tool_choice": {"type": "function",
                                                                          "function": {"name": "get_weather"}}})
    assert forced.status_code == 200, forced.content
    assert "<tool_call>" in worker[-1]["parameters"]["grammar"]
    none = await chat(token, {"model": "qwen", **CHAT, "tool_choice": "none"})
    assert "tools" not in worker[-1]["parameters"] and "tool_calls" not in none.json()["choices"][0]["message"]
    both = await chat(token, {"model": "qwen", **CHAT, "tool_choice": "required",
                              "response_format": {"type": "json_object"}})
    assert both.status_code == 400 and both.json()["error"]["param"] == "tools"


async def test_a_model_whose_template_reads_no_tools_is_a_400(token: str, worker: list[dict[str, Any]]) -> None:
    response = await chat(token, {"model": "plain", **CHAT})
    assert response.status_code == 400 and response.json()["error"]["param"] == "tools"
    assert "tool_call_format" in response.json()["error"]["message"] and not worker


async def test_the_ledger_counts_the_call_tokens(token: str, worker: list[dict[str, Any]], broker: str) -> None:
    await chat(token, {"model": "qwen", **CHAT})
    streamed = await chat(token, {"model": "qwen", **CHAT, "stream": True})
    assert b"[DONE]" in b"".join([chunk async for chunk in streamed.streaming_content])
    while not deferred.writes.idle:
        await asyncio.sleep(0.005)
    await sync_to_async(ledger_flush.flush)(redis.Redis.from_url(broker), get_channel_layer().prefix, 10.0)
    [row] = await sync_to_async(list)(UsageRecord.objects.filter(model="qwen").values("requests", "output_tokens"))
    assert row == {"requests": 2, "output_tokens": 10}


def test_the_document_describes_tool_calls() -> None:
    doc = openapi.build_schema(4)
    request = doc["components"]["schemas"]["ChatCompletionRequest"]
    assert {"tools", "tool_choice", "parallel_tool_calls"} <= set(request["properties"])
    answer = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "qwen",
              "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [
                  {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                           "logprobs": None, "finish_reason": "tool_calls"}],
              "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}
    schema = doc["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    validator = jsonschema_rs.validator_for({**schema, "components": doc["components"]})
    assert validator.is_valid(answer)
    answer["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = {}
    assert not validator.is_valid(answer)


FORCED_PIECES = ["<tool_call>\n", '{"name":"get_', 'weather","arguments":{"ci', 'ty":"Ro', 'me {', '}"}}', "\n</tool_call>"]


async def test_a_forced_call_streams_its_arguments_as_generated_and_joins_to_the_whole_call(
        token: str, models: None) -> None:
    forced = {"model": "qwen", **CHAT, "tool_choice": "required"}
    async with stub_generator.generating(["qwen"], FORCED_PIECES):
        whole = (await chat(token, forced)).json()["choices"][0]
        response = await chat(token, {**forced, "stream": True})
        body = b"".join([chunk async for chunk in response.streaming_content]).decode()
    [call] = whole["message"]["tool_calls"]
    assert whole["finish_reason"] == "tool_calls" and whole["message"]["content"] is None
    assert call["function"] == {"name": "get_weather", "arguments": '{"city":"Rome {}"}'}  # as the model wrote it
    chunks = [json.loads(line[6:]) for line in body.split("\n\n") if line.startswith("data: {")]
    deltas = [d["tool_calls"][0] for c in chunks if c["choices"] for d in [c["choices"][0]["delta"]]
              if "tool_calls" in d]
    assert deltas[0]["function"] == {"name": "get_weather", "arguments": ""} and deltas[0]["id"].startswith("call_")
    pieces = [d["function"]["arguments"] for d in deltas[1:]]
    assert pieces == ['{"ci', 'ty":"Ro', 'me {', '}"}']  # one delta per token, as generated
    assert "".join(pieces) == call["function"]["arguments"]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]] \
        == ["tool_calls"]
