"""Matryoshka `dimensions`/`truncate_dim` on the HF feature-extraction route (worker stubbed)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from models_registry.api.hf import dimensions
from models_registry.broker.handoff import InferenceResult
from models_registry.models import RegisteredModel
from tests.asgi_client import AsyncClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens")]

RAW = np.array([[3.0, 4.0, 12.0, 0.5], [1.0, 0.0, 0.0, 2.0]], dtype="<f4")


@pytest.fixture
def token(make_model: Callable[..., RegisteredModel], make_token: Callable[..., str]) -> str:
    emb = make_model("emb", task="feature-extraction", pooling="mean", normalize=True)
    emb.tasks.create(name="raw", task="feature-extraction", pooling="mean", normalize=False)
    emb.tasks.create(name="sized", task="feature-extraction", parameters={"matryoshka_dimensions": [2, 4]})
    return make_token("all")


@pytest.fixture
def calls(stub_worker: Callable[..., list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The worker answers RAW rows, normalized when the request's parameters say so (as the runner does)."""

    def answer(kwargs: dict[str, Any]) -> InferenceResult:
        rows = RAW[: len(kwargs["inputs"])]
        if kwargs["task"] != "raw":
            rows = rows / np.linalg.norm(rows, axis=1, keepdims=True)
        outputs = [[row.astype("<f4").tobytes(), [row.shape[0]]] for row in rows]
        return InferenceResult(outputs=outputs, queue_ms=1.0, compute_ms=1.0, batch_size=1)

    dimensions._native.clear()
    return stub_worker(answer)


async def post(client: AsyncClient, path: str, body: Any, token: str) -> Any:
    return await client.post(f"/models/{path}", data=json.dumps(body), content_type="application/json",
                             headers={"Authorization": f"Bearer {token}"})


async def test_truncate_dim_cuts_and_renormalizes(token: str, calls: list[dict[str, Any]]) -> None:
    response = await post(AsyncClient(), "emb", {"inputs": ["a", "b"], "truncate_dim": 2}, token)
    assert response.status_code == 200, response.content
    got = np.array(response.json(), dtype="<f4")
    want = RAW[:, :2] / np.linalg.norm(RAW[:, :2], axis=1, keepdims=True)
    assert np.allclose(got, want, atol=1e-6)
    assert "truncate_dim" not in calls[0]["parameters"]


async def test_dimensions_in_parameters_without_normalize_only_cut(token: str, calls: list[dict[str, Any]]) -> None:
    response = await post(AsyncClient(), "emb/raw", {"inputs": "a", "parameters": {"dimensions": 3}}, token)
    assert response.json() == [3.0, 4.0, 12.0]


async def test_the_request_may_ask_for_normalize_on_a_raw_task(token: str, calls: list[dict[str, Any]]) -> None:
    response = await post(AsyncClient(), "emb/raw", {"inputs": "a", "dimensions": 2, "normalize": True}, token)
    assert np.allclose(response.json(), [0.6, 0.8])


@pytest.mark.parametrize(("body", "words"), [
    ({"inputs": "a", "dimensions": 0}, "from 1 to"),
    ({"inputs": "a", "dimensions": "2"}, "integer"),
    ({"inputs": "a", "dimensions": 2, "truncate_dim": 3}, "disagree"),
    ({"inputs": "a", "parameters": {"matryoshka_dimensions": [2]}}, "set by the task's registration"),
])
async def test_bad_sizes_are_400_before_compute(token: str, calls: list[dict[str, Any]], body: Any, words: str) -> None:
    response = await post(AsyncClient(), "emb", body, token)
    assert response.status_code == 400 and words in response.json()["error"], response.content
    assert not calls


async def test_over_the_models_size_is_400(token: str, calls: list[dict[str, Any]]) -> None:
    response = await post(AsyncClient(), "emb", {"inputs": "a", "dimensions": 5}, token)
    assert response.status_code == 400 and "more than the model's 4 dimensions" in response.json()["error"]


async def test_declared_sizes_only(token: str, calls: list[dict[str, Any]]) -> None:
    refused = await post(AsyncClient(), "emb/sized", {"inputs": "a", "dimensions": 3}, token)
    assert refused.status_code == 400 and "2, 4" in refused.json()["error"]
    assert len((await post(AsyncClient(), "emb/sized", {"inputs": "a", "dimensions": 2}, token)).json()) == 2
