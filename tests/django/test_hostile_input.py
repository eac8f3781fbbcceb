"""What an attacker sends the web process: hostile bodies, scoped tokens, headers (no worker, no broker)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest
from django.test import AsyncClient

from models_registry.api import auth
from models_registry.models import RegisteredModel
from tests.django.test_api_views import bearer, db, error_of, post

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens")]

DEEP = b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
DEEP_OBJECTS = b'{"inputs": "x", "parameters": ' + b'{"a":' * 50_000 + b"1" + b"}" * 50_000 + b"}"
HUGE_INT = b'{"inputs": "x", "parameters": {"top_k": ' + b"9" * 5_000 + b"}}"
INT_OVER_64_BITS = b'{"inputs": "x", "parameters": {"top_k": ' + b"9" * 30 + b"}}"
DEEP_BUT_PARSEABLE = b'{"inputs": "x", "parameters": {"a": ' + b"[" * 40 + b"]" * 40 + b"}}"


@pytest.fixture
def client() -> AsyncClient:
    return AsyncClient()


@pytest.fixture
def emb(make_model: Callable[..., RegisteredModel]) -> RegisteredModel:
    """A feature-extraction model (serves both the HF and the OpenAI route)."""
    return make_model("emb", task="feature-extraction", pooling="mean")


@pytest.fixture
def token(make_token: Callable[..., str], emb: RegisteredModel) -> str:
    return make_token("all")


# --- deep or huge JSON --------------------------------------------------------------------
@pytest.mark.parametrize("body", [DEEP, DEEP_OBJECTS, HUGE_INT, INT_OVER_64_BITS, DEEP_BUT_PARSEABLE],
                         ids=["deep-lists", "deep-objects", "huge-int", "int-over-64-bits", "deep-but-parseable"])
async def test_deep_or_huge_json_is_a_400_without_a_traceback(client: AsyncClient, token: str, body: bytes,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        response = await post(client, "/models/emb", body, token)
    message = error_of(response, 400, "invalid_input")
    assert "nests deeper than 32" in message or "digits" in message
    assert not [r for r in caplog.records if r.exc_info], "a hostile body must not log a traceback"


@pytest.mark.parametrize("body", [
    b'{"model": "emb", "input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"model": "emb", "input": "x", "dimensions": ' + b"9" * 5_000 + b"}",
], ids=["deep", "huge-int"])
async def test_deep_or_huge_json_on_the_openai_route_is_a_400(client: AsyncClient, token: str, body: bytes,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        response = await post(client, "/v1/embeddings", body, token)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "invalid_input"
    assert not [r for r in caplog.records if r.exc_info]


# --- a flood of bad tokens ------------------------------------------------------------------
async def test_a_flood_of_random_bad_tokens_costs_no_database_lookup_each(
        client: AsyncClient, token: str, make_token: Callable[..., str], monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"token": 0, "all": 0}
    real_lookup, real_all = auth._lookup, auth._all_hashes

    def counted_lookup(digest: str) -> Any:
        calls["token"] += 1
        return real_lookup(digest)

    def counted_all() -> Any:
        calls["all"] += 1
        return real_all()

    monkeypatch.setattr(auth, "_lookup", counted_lookup)
    monkeypatch.setattr(auth, "_all_hashes", counted_all)
    for i in range(200):
        response = await client.get("/models", headers=bearer(f"hst_random-{i}"))
        error_of(response, 401, "unauthorized")
    assert calls["token"] == 0, "an unknown token must not cost a lookup of its own"
    assert calls["all"] <= 3, calls  # one load of the known hashes per 0.5 s at most
    assert (await client.get("/models", headers=bearer(token))).status_code == 200
    # A token created now is known once the short negative window has passed.
    raw = await db(make_token, "new")
    await asyncio.sleep(auth._KNOWN_TTL_S)
    assert (await client.get("/models", headers=bearer(raw))).status_code == 200
