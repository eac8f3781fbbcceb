"""Hostile tools on POST /v1/chat/completions: huge, deep or invalid parameter schemas are fast 400s naming
tools[n].function.parameters, as response_format's are (tests/django/test_structured_output_route.py), and a
forced call's compile runs off the event loop (no worker, no broker: all is answered before a hand-off)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from models_registry.api.openai import structured_output, tool_grammar
from models_registry.api.openai.structured_output import GrammarCompiles
from models_registry.broker.handoff import InferenceResult
from models_registry.models import RegisteredModel
from models_registry.tasks.schema_bounds import SchemaError
from tests.asgi_client import AsyncClient
from tests.django.test_api_views import post
from tests.django.test_structured_output_route import ANYOF_5000, REF_LOOP, SELF_REQUIRED

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens")]

MESSAGES = [{"role": "user", "content": "hi"}]
FINE = {"type": "function", "function": {"name": "fine", "parameters": {"type": "object", "properties": {}}}}
DEEP: dict[str, Any] = {"type": "object"}
for _ in range(40):
    DEEP = {"type": "object", "properties": {"a": DEEP}}


def tools(parameters: Any) -> list[dict[str, Any]]:
    """FINE, then a tool whose parameters are the schema under test (so its index is 1)."""
    return [FINE, {"type": "function", "function": {"name": "hostile", "parameters": parameters}}]


@pytest.fixture
def qwen(make_model: Callable[..., RegisteredModel]) -> RegisteredModel:
    return make_model("qwen", task="text-generation", file_settings={"tool_call_format": "hermes"})


@pytest.fixture
def token(make_token: Callable[..., str], qwen: RegisteredModel, make_model: Callable[..., RegisteredModel]) -> str:
    make_model("emb", task="feature-extraction", pooling="mean")
    return make_token("all")


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> Callable[..., GrammarCompiles]:
    """A fresh pool of forced-call compiles for the test (the real compile unless one is given)."""

    def install(compile: Callable[[str], str] | None = None) -> GrammarCompiles:
        pool = GrammarCompiles(compile or tool_grammar.compile_source, refusal=structured_output.tools_refused)
        monkeypatch.setattr(structured_output, "TOOL_COMPILES", pool)
        return pool

    install()
    return install


def refused(response: Any, param: str) -> str:
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["error"]["code"] == body["error_type"] == "invalid_input"
    assert body["error"]["param"] == param
    return str(body["error"]["message"])


@pytest.mark.parametrize(("schema", "words"), [
    (REF_LOOP, "no finite instance: the $ref '#/$defs/a' at # leads back to itself"),
    (SELF_REQUIRED, "no finite instance: the $ref '#' at #/properties/child"),
    (ANYOF_5000, "402,791 bytes as compact JSON; at most 100,000"),
    ({"anyOf": [{"minimum": i} for i in range(5000)]}, "more than 500 branches in all"),
    ({"enum": [0] * 20_000}, "an enum has 20,000 values; at most 1,000"),
    ({"properties": {str(i): {} for i in range(2_000)}}, "lists 2,000 properties; at most 400 in one object"),
])
@pytest.mark.parametrize("choice", ["auto", "required"])
async def test_hostile_parameter_schemas_are_fast_400s_naming_the_tool(
        token: str, compiles: Callable[..., GrammarCompiles], stub_worker: Callable[..., list[dict[str, Any]]],
        schema: Any, words: str, choice: str) -> None:
    pool = compiles()
    seen = stub_worker(lambda kwargs: pytest.fail("refused tools reached a worker"))
    started = time.perf_counter()
    response = await post(AsyncClient(), "/v1/chat/completions", {
        "model": "qwen", "messages": MESSAGES, "tools": tools(schema), "tool_choice": choice}, token)
    message = refused(response, "tools[1].function.parameters")
    assert words in message and message.startswith("tools[1].function.parameters cannot be used")
    assert time.perf_counter() - started < 2 and seen == [] and pool.compiles == 0  # refused before any compile


async def test_a_schema_deeper_than_a_body_may_nest_is_a_fast_400(token: str,
                                                                  compiles: Callable[..., GrammarCompiles]) -> None:
    """The body's own bound (32 levels) comes first: a schema cannot nest past the schema bound (32 subschemas)."""
    pool = compiles()
    started = time.perf_counter()
    response = await post(AsyncClient(), "/v1/chat/completions", {
        "model": "qwen", "messages": MESSAGES, "tools": tools(DEEP), "tool_choice": "required"}, token)
    assert response.status_code == 400 and "nests deeper than 32 levels" in response.json()["error"]["message"]
    assert time.perf_counter() - started < 2 and pool.compiles == 0


@pytest.mark.parametrize(("schema", "words"), [
    ({"type": "strin"}, "Invalid type: strin"),
    ({"type": "object", "properties": 5}, "properties must be an object"),
    ({"type": "object", "properties": {"a": {"type": "string", "pattern": "(("}}}, "unclosed group"),
])
async def test_a_schema_the_engine_refuses_is_a_400_naming_the_forced_function(
        token: str, compiles: Callable[..., GrammarCompiles], schema: Any, words: str) -> None:
    named = {"type": "function", "function": {"name": "hostile"}}
    for choice, param in ((named, "tools[1].function.parameters"), ("required", "tools")):
        message = refused(await post(AsyncClient(), "/v1/chat/completions", {
            "model": "qwen", "messages": MESSAGES, "tools": tools(schema), "tool_choice": choice}, token), param)
        assert "cannot force a call" in message and words in message
    one = refused(await post(AsyncClient(), "/v1/chat/completions", {
        "model": "qwen", "messages": MESSAGES, "tools": tools(schema)[1:], "tool_choice": "required"}, token),
        "tools[0].function.parameters")
    assert words in one


async def test_a_strangers_tools_are_never_compiled(qwen: RegisteredModel,
                                                   compiles: Callable[..., GrammarCompiles]) -> None:
    pool = compiles()
    response = await post(AsyncClient(), "/v1/chat/completions", {
        "model": "qwen", "messages": MESSAGES, "tools": [FINE], "tool_choice": "required"}, "bad")
    assert response.status_code == 401 and pool.compiles == 0


async def test_health_and_another_models_embeddings_answer_while_a_forced_call_compiles(
        token: str, compiles: Callable[..., GrammarCompiles], stub_worker: Callable[..., list[dict[str, Any]]]) -> None:
    """The forced call's compile is held in its thread: the event loop still answers /health and embeddings."""
    entered, release = threading.Event(), threading.Event()

    def held(text: str) -> str:
        entered.set()
        release.wait(30)
        raise SchemaError("the held compile refuses it")

    compiles(held)
    stub_worker(lambda kwargs: InferenceResult(outputs=[[b"\x00\x00\x80?", [1]]], queue_ms=1, compute_ms=1,
                                               batch_size=1, tokens=2))
    client = AsyncClient()
    chat = asyncio.ensure_future(post(client, "/v1/chat/completions", {
        "model": "qwen", "messages": MESSAGES, "tools": [FINE], "tool_choice": "required"}, token))
    try:
        assert await asyncio.to_thread(entered.wait, 30)
        health = await client.get("/health")
        embedded = await post(client, "/v1/embeddings", {"model": "emb", "input": "x"}, token)
        assert not chat.done() and not release.is_set()  # both answered while the compile was still held
    finally:
        release.set()
    assert health.status_code == 200 and embedded.status_code == 200
    assert "the held compile refuses it" in refused(await chat, "tools[0].function.parameters")
