"""What is metered: the computed cost of a request before admission, /tokenize, and what /metrics shows of tokens."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from models_registry.broker.handoff import InferenceResult
from models_registry.models import RegisteredModel
from tests import model_factory
from tests.asgi_client import AsyncClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens", "broker", "within_one_minute")]


@pytest.fixture
def calls(stub_worker: Callable[..., list[dict[str, Any]]]) -> list[dict[str, Any]]:
    def answer(kwargs: dict[str, Any]) -> InferenceResult:
        vector = [struct.pack("<2f", 0.6, 0.8), [2]]  # the worker's float32 bytes and shape
        return InferenceResult(outputs=[vector] * len(kwargs["inputs"]), queue_ms=1.0, compute_ms=2.0,
                               batch_size=1, tokens=7)

    return stub_worker(answer)


async def post(path: str, token: str, body: dict[str, Any]) -> Any:
    return await AsyncClient().post(path, data=json.dumps(body), content_type="application/json",
                                    headers={"Authorization": f"Bearer {token}"})


async def test_a_prompt_is_charged_with_every_input(
    make_model: Callable[..., RegisteredModel], make_token: Callable[..., str], calls: list[dict[str, Any]],
) -> None:
    # The reproduction: 256 one-word inputs behind a 600-word prompt were charged as 256 words.
    await sync_to_async(make_model)("emb", task="feature-extraction")
    token = await sync_to_async(make_token)("tpm", tokens_per_minute=20_000)
    plain = await post("/models/emb", token, {"inputs": ["a"] * 256})
    assert plain.status_code == 200, plain.content
    prompted = await post("/models/emb", token, {"inputs": ["a"] * 256, "parameters": {"prompt": "word " * 600}})
    assert prompted.status_code == 413 and "tokens_per_minute" in prompted.json()["error"], prompted.content
    assert len(calls) == 1


async def test_zero_shot_is_charged_labels_times_inputs(
    make_model: Callable[..., RegisteredModel], make_token: Callable[..., str], calls: list[dict[str, Any]],
) -> None:
    await sync_to_async(make_model)("nli", task="zero-shot-classification")
    token = await sync_to_async(make_token)("tpm", tokens_per_minute=1000)
    labels = [f"label number {i}" for i in range(100)]
    response = await post("/models/nli", token, {"inputs": ["a short text"] * 10,
                                                 "parameters": {"candidate_labels": labels}})
    assert response.status_code == 413, response.content
    assert not calls


async def test_tokenize_counts_against_the_tokens_rate_limit(
    make_model: Callable[..., RegisteredModel], make_token: Callable[..., str],
) -> None:
    minilm = await sync_to_async(make_model)("minilm", task="feature-extraction")
    await sync_to_async(RegisteredModel.objects.filter(pk=minilm.pk).update)(source=str(model_factory.minilm_path()))
    token = await sync_to_async(make_token)("one-a-minute", requests_per_minute=1)
    first = await post("/tokenize", token, {"model": "minilm", "inputs": "hello"})
    assert first.status_code == 200 and first["X-RateLimit-Remaining"] == "0", first.content
    second = await post("/tokenize", token, {"model": "minilm", "inputs": "hello"})
    assert second.status_code == 429 and second.json()["error_type"] == "rate_limited"


async def test_open_metrics_show_no_token_names_unless_asked(
    make_model: Callable[..., RegisteredModel], make_token: Callable[..., str], calls: list[dict[str, Any]],
    settings: Any,
) -> None:
    from models_registry.observe import metrics as observed

    observed._token_labels.clear()
    await sync_to_async(make_model)("emb", task="feature-extraction")
    token = await sync_to_async(make_token)("acme-corp-secret-customer", requests_per_minute=100)
    assert (await post("/models/emb", token, {"inputs": "hi"})).status_code == 200
    assert "acme-corp" not in (await AsyncClient().get("/metrics")).content.decode()
    settings.HOSTING_METRICS_TOKEN_NAMES = True
    assert (await post("/models/emb", token, {"inputs": "hi"})).status_code == 200
    assert 'token="acme-corp-secret-customer"' in (await AsyncClient().get("/metrics")).content.decode()
