"""response_format on the chat and completions routes: hostile schemas are 400s before compute, and compiles run
off the event loop (no worker, no broker: everything here is answered before a hand-off)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from models_registry.api.openai import structured_output
from models_registry.api.openai.structured_output import GrammarCompiles
from models_registry.broker.handoff import InferenceResult
from models_registry.models import RegisteredModel
from models_registry.tasks.schema_bounds import SchemaError
from tests.asgi_client import AsyncClient
from tests.django.test_api_views import post

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens")]

MESSAGES = [{"role": "user", "content": "hi"}]
REF_LOOP = {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}
SELF_REQUIRED = {"type": "object", "properties": {"child": {"$ref": "#"}}, "required": ["child"]}
ANYOF_5000 = {"anyOf": [{"type": "object", "properties": {f"k{i}": {"type": "integer"}}, "required": [f"k{i}"]}
                        for i in range(5000)]}


def form(schema: Any) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}


@pytest.fixture
def gpt(make_model: Callable[..., RegisteredModel]) -> RegisteredModel:
    return make_model("gpt", task="text-generation")


@pytest.fixture
def token(make_token: Callable[..., str], gpt: RegisteredModel, make_model: Callable[..., RegisteredModel]) -> str:
    make_model("emb", task="feature-extraction", pooling="mean")
    return make_token("all")


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[str], str]], GrammarCompiles]:
    """A fresh GrammarCompiles for the test (with the real compile unless one is given): nothing kept from others."""

    def install(compile: Callable[[str], str] | None = None) -> GrammarCompiles:
        pool = GrammarCompiles(**({"compile": compile} if compile else {}))
        monkeypatch.setattr(structured_output, "COMPILES", pool)
        return pool

    install()
    return install


def openai_error(response: Any) -> dict[str, Any]:
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["error"]["code"] == body["error_type"] == "invalid_input"
    assert body["error"]["param"] == "response_format"
    return body["error"]


@pytest.mark.parametrize(("schema", "words"), [
    (REF_LOOP, "no finite instance: the $ref '#/$defs/a' at # leads back to itself"),
    (SELF_REQUIRED, "no finite instance: the $ref '#' at #/properties/child"),
    (ANYOF_5000, "402,791 bytes as compact JSON; at most 100,000"),
    ({"anyOf": [{"minimum": i} for i in range(5000)]}, "more than 500 branches in all"),
    ({"enum": [0] * 20_000}, "an enum has 20,000 values; at most 1,000"),
    ({"properties": {str(i): {} for i in range(2_000)}}, "lists 2,000 properties; at most 400 in one object"),
])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
async def test_issue_50s_schemas_are_400s_naming_response_format(
        token: str, compiles: Any, stub_worker: Callable[..., list[dict[str, Any]]], schema: Any, words: str,
        path: str) -> None:
    seen = stub_worker(lambda kwargs: pytest.fail("a refused schema reached a worker"))
    body = {"model": "gpt", "response_format": form(schema),
            **({"messages": MESSAGES} if "chat" in path else {"prompt": "a"})}
    error = openai_error(await post(AsyncClient(), path, body, token))
    assert words in error["message"] and "cannot be used for structured output" in error["message"]
    assert seen == []


async def test_a_strangers_schema_is_never_compiled(gpt: RegisteredModel, compiles: Any) -> None:
    pool = compiles()
    response = await post(AsyncClient(), "/v1/chat/completions",
                          {"model": "gpt", "messages": MESSAGES, "response_format": form({"type": "object"})}, "bad")
    assert response.status_code == 401 and pool.compiles == 0


async def test_health_and_another_tenants_embeddings_answer_while_a_compile_is_in_flight(
        token: str, compiles: Any, stub_worker: Callable[..., list[dict[str, Any]]]) -> None:
    """The compile is held in its thread: the event loop still answers /health and an embeddings request."""
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
        "model": "gpt", "messages": MESSAGES, "response_format": form({"type": "object"})}, token))
    try:
        assert await asyncio.to_thread(entered.wait, 30)
        health = await client.get("/health")
        embedded = await post(client, "/v1/embeddings", {"model": "emb", "input": "x"}, token)
        assert not chat.done() and not release.is_set()  # both answered while the compile was still held
    finally:
        release.set()
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert embedded.status_code == 200 and embedded.json()["data"][0]["embedding"] == [1.0]
    assert "the held compile refuses it" in openai_error(await chat)["message"]


async def test_one_schema_is_compiled_once_for_every_request_that_sends_it(
        token: str, compiles: Any, stub_worker: Callable[..., list[dict[str, Any]]]) -> None:
    pool = compiles()
    for order in (REF_LOOP, dict(reversed(list(REF_LOOP.items())))):  # the same schema, its keys in another order
        openai_error(await post(AsyncClient(), "/v1/chat/completions",
                                {"model": "gpt", "messages": MESSAGES, "response_format": form(order)}, token))
    assert pool.compiles == 1
