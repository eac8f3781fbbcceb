"""The HF route's "stream" key: checked before anything is queued, and documented (no worker here)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from models_registry.models import RegisteredModel
from tests.asgi_client import AsyncClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens")]


@pytest.fixture
def token(make_model: Callable[..., RegisteredModel], make_token: Callable[..., str]) -> str:
    make_model("gpt", task="text-generation")
    make_model("bart", task="text2text-generation")
    make_model("cls", task="text-classification")
    return make_token("all")


async def post(path: str, body: Any, token: str) -> Any:
    return await AsyncClient().post(f"/models/{path}", data=json.dumps(body), content_type="application/json",
                                    headers={"Authorization": f"Bearer {token}"})


@pytest.mark.parametrize(("path", "body", "status", "words"), [
    ("cls", {"inputs": "a", "stream": True}, 400, "'stream' is for text-generation and text2text-generation"),
    ("gpt", {"inputs": "a", "stream": "yes"}, 400, "'stream' must be true or false"),
    ("gpt", {"inputs": ["a", "b"], "stream": True}, 400, "one prompt"),
    ("gpt", {"inputs": "a", "stream": True, "parameters": {"details": "yes"}}, 400, "'details' must be true"),
    ("gpt", {"inputs": "a", "stream": True, "parameters": {"watermark": True}}, 400, "watermark"),
    ("gpt", {"inputs": "a", "stream": True}, 503, "no live worker"),  # valid: reaches the serving check
    ("bart", {"inputs": "a", "stream": True}, 503, "no live worker"),
    ("gpt", {"inputs": "a", "stream": False, "parameters": {"details": True}}, 503, "no live worker"),
])
async def test_stream_requests_are_checked_first(token: str, path: str, body: Any, status: int, words: str) -> None:
    response = await post(path, body, token)
    assert response.status_code == status and words in response.json()["error"], response.content


async def test_the_document_shows_stream_and_its_events(token: str) -> None:
    public = (await AsyncClient().get("/api/openapi.json")).json()
    assert "text/event-stream" in public["paths"]["/models/{name}"]["post"]["responses"]["200"]["content"]
    document = (await AsyncClient().get("/api/openapi.json", headers={"Authorization": f"Bearer {token}"})).json()
    assert "stream" in document["components"]["schemas"]["TextGenerationRequest"]["properties"]
    other = document["components"]["schemas"]["TextClassificationRequest"]["properties"]["stream"]
    assert "only text-generation and text2text-generation stream" in other["description"]  # false or null only
    assert "text/event-stream" in document["paths"]["/models/gpt"]["post"]["responses"]["200"]["content"]
    assert "text/event-stream" not in document["paths"]["/models/cls"]["post"]["responses"]["200"]["content"]
