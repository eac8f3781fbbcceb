"""POST /v1/embeddings and GET /v1/models through Django's AsyncClient (no worker, no broker).

The worker's answer is stubbed where a test needs one: what is tested is the web side
(auth, validation, the OpenAI shapes, base64 of the worker's own bytes, error mapping).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from asgiref.sync import sync_to_async

from models_registry.api.hf import dimensions
from models_registry.catalog import lookups
from models_registry.broker.handoff import InferenceResult
from models_registry.core.errors import Timeout
from models_registry.models import RegisteredModel
from models_registry.policy import dispatch
from tests.asgi_client import AsyncClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens")]

VECTORS = np.array([[0.1, -2.5, 3.0], [1e-8, 0.0, -0.0]], dtype="<f4")


@pytest.fixture
def client() -> AsyncClient:
    return AsyncClient()


@pytest.fixture
def models(make_model: Callable[..., RegisteredModel]) -> None:
    """An embedding model (with a second, token-level task), a fill-mask model and a disabled embedder."""
    emb = make_model("emb", task="feature-extraction", pooling="mean", normalize=True)
    emb.tasks.create(name="cls-pool", task="feature-extraction", pooling="cls")
    emb.tasks.create(name="tokens", task="feature-extraction", pooling="none")
    make_model("bert", task="fill-mask")
    make_model("off", task="feature-extraction", enabled=False)


@pytest.fixture
def token(make_token: Callable[..., str], models: None) -> str:
    return make_token("all")


@pytest.fixture
def worker_answers(stub_worker: Callable[..., list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Stub the hand-off: every call answers VECTORS[:n] as the worker sends them ([bytes, shape])."""

    def answer(kwargs: dict[str, Any]) -> InferenceResult:
        outputs = [[row.tobytes(), [row.shape[0]]] for row in VECTORS[: len(kwargs["inputs"])]]
        return InferenceResult(outputs=outputs, queue_ms=1.5, compute_ms=2.5, batch_size=2, tokens=7)

    dimensions._native.clear()
    return stub_worker(answer)


async def embed(client: AsyncClient, body: Any, token: str | None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return await client.post("/v1/embeddings", data=json.dumps(body), content_type="application/json",
                             headers=headers)


def openai_error(response: Any, status: int, code: str) -> dict[str, Any]:
    """Assert OpenAI's error shape (what the openai SDK reads) and return its error object."""
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error", "error_type"} and body["error_type"] == code
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code
    assert error["type"] == ("server_error" if status >= 500 else "invalid_request_error")
    assert response.has_header("X-Request-Id")
    return error


async def test_float_embeddings_in_openai_shape(client: AsyncClient, token: str,
                                                worker_answers: list[dict[str, Any]]) -> None:
    response = await embed(client, {"model": "emb", "input": ["a", "b"], "user": "u1"}, token)
    assert response.status_code == 200, response.content
    body = response.json()
    embeddings = [item.pop("embedding") for item in body["data"]]
    assert body == {
        "object": "list",
        "data": [{"object": "embedding", "index": i} for i in range(2)],
        "model": "emb",
        "usage": {"prompt_tokens": 7, "total_tokens": 7},
    }
    # Shortest numbers that read back as the worker's exact float32 values.
    assert embeddings == [[0.1, -2.5, 3.0], [1e-08, 0.0, -0.0]]
    for got, want in zip(embeddings, VECTORS):
        assert np.array_equal(np.asarray(got, dtype="<f4"), want)
    assert worker_answers[0]["model"] == "emb" and worker_answers[0]["task"] == "feature-extraction"
    assert response["X-Batch-Size"] == "2" and response["X-Queue-Time-Ms"] == "1.50"


async def test_base64_is_the_workers_float32_bytes(client: AsyncClient, token: str,
                                                   worker_answers: list[dict[str, Any]]) -> None:
    response = await embed(client, {"model": "emb", "input": "a", "encoding_format": "base64"}, token)
    [item] = response.json()["data"]
    assert base64.b64decode(item["embedding"]) == VECTORS[0].tobytes()  # no float round trip


async def test_a_named_task_is_model_slash_task(client: AsyncClient, token: str,
                                                worker_answers: list[dict[str, Any]]) -> None:
    response = await embed(client, {"model": "emb/cls-pool", "input": "a"}, token)
    assert response.status_code == 200 and response.json()["model"] == "emb/cls-pool"
    assert worker_answers[0]["task"] == "cls-pool"


async def test_dimensions_are_the_first_components_renormalized(
    client: AsyncClient, token: str, worker_answers: list[dict[str, Any]]
) -> None:
    response = await embed(client, {"model": "emb", "input": ["a", "b"], "dimensions": 2}, token)
    assert response.status_code == 200, response.content
    got = np.array([item["embedding"] for item in response.json()["data"]], dtype="<f4")
    cut = VECTORS[:, :2]
    want = cut / np.maximum(np.linalg.norm(cut, axis=1, keepdims=True), 1e-12)  # the task normalizes
    assert got.shape == (2, 2) and np.allclose(got, want, atol=1e-6)
    assert "dimensions" not in worker_answers[0]["parameters"]  # applied in the web process


async def test_dimensions_without_normalize_are_only_cut(client: AsyncClient, token: str,
                                                         worker_answers: list[dict[str, Any]]) -> None:
    response = await embed(client, {"model": "emb/cls-pool", "input": "a", "dimensions": 1,
                                    "encoding_format": "base64"}, token)
    [item] = response.json()["data"]
    assert base64.b64decode(item["embedding"]) == VECTORS[0][:1].tobytes()


async def test_dimensions_over_the_models_size_are_400_before_compute_once_known(
    client: AsyncClient, token: str, worker_answers: list[dict[str, Any]]
) -> None:
    first = await embed(client, {"model": "emb", "input": "a", "dimensions": 4}, token)
    assert "more than the model's 3 dimensions" in openai_error(first, 400, "invalid_input")["message"]
    assert len(worker_answers) == 1  # learnt from this answer
    again = await embed(client, {"model": "emb", "input": "a", "dimensions": 4}, token)
    assert openai_error(again, 400, "invalid_input")["param"] == "dimensions"
    assert len(worker_answers) == 1  # refused without asking a worker
    native = await embed(client, {"model": "emb", "input": "a", "dimensions": 3}, token)
    assert native.status_code == 200


async def test_a_task_may_declare_its_sizes(client: AsyncClient, token: str,
                                            worker_answers: list[dict[str, Any]]) -> None:
    await sync_to_async(lambda: RegisteredModel.objects.get(name="emb").tasks.filter(name="cls-pool").update(
        parameters={"matryoshka_dimensions": [2]}))()
    lookups.reset()
    refused = await embed(client, {"model": "emb/cls-pool", "input": "a", "dimensions": 1}, token)
    assert "not one of the sizes this task serves: 2" in openai_error(refused, 400, "invalid_input")["message"]
    assert not worker_answers
    allowed = await embed(client, {"model": "emb/cls-pool", "input": "a", "dimensions": 2}, token)
    assert len(allowed.json()["data"][0]["embedding"]) == 2
    assert "matryoshka_dimensions" not in worker_answers[0]["parameters"]


@pytest.mark.parametrize(("body", "param", "words"), [
    ({"model": "emb", "input": [[1, 2]]}, "input", "token-id arrays are not supported"),
    ({"model": "emb", "input": [101, 102]}, "input", "token-id arrays are not supported"),
    ({"model": "emb", "input": []}, "input", "must not be an empty list"),
    ({"model": "emb", "input": ["ok", None]}, "input", "input[1] must be a string"),
    ({"model": "emb"}, "input", "'input' is required"),
    ({"input": "x"}, "model", "'model' is required"),
    ({"model": "emb", "input": "x", "encoding_format": "binary"}, "encoding_format", "float or base64"),
    ({"model": "emb", "input": "x", "dimensions": "384"}, "dimensions", "positive integer"),
    ({"model": "emb", "input": "x", "temperature": 1}, "temperature", "unrecognized request argument"),
    ({"model": "bert", "input": "x"}, "model", "fill-mask task, not an embedding model"),
    ({"model": "emb/tokens", "input": "x"}, "model", "one vector per token"),
])
async def test_bad_requests_are_clear_400s(client: AsyncClient, token: str, body: dict[str, Any], param: str,
                                           words: str) -> None:
    error = openai_error(await embed(client, body, token), 400, "invalid_input")
    assert words in error["message"] and error["param"] == param


async def test_plain_text_is_refused_with_a_hint(client: AsyncClient, token: str) -> None:
    response = await client.post("/v1/embeddings", data="hello", content_type="text/plain",
                                 headers={"Authorization": f"Bearer {token}"})
    assert "send a JSON body" in openai_error(response, 400, "invalid_input")["message"]


async def test_too_many_inputs_is_413(client: AsyncClient, token: str, settings: Any) -> None:
    settings.HOSTING_MAX_INPUTS = 2
    openai_error(await embed(client, {"model": "emb", "input": ["a", "b", "c"]}, token), 413, "too_large")


async def test_auth_errors(client: AsyncClient, token: str, make_token: Callable[..., str]) -> None:
    missing = openai_error(await embed(client, {"model": "emb", "input": "x"}, None), 401, "unauthorized")
    assert "missing API token" in missing["message"]
    openai_error(await embed(client, {"model": "emb", "input": "x"}, "hst_nope"), 401, "unauthorized")
    bert = await sync_to_async(RegisteredModel.objects.get)(name="bert")
    limited = await sync_to_async(make_token)("bert-only", models=[bert])
    denied = openai_error(await embed(client, {"model": "emb/cls-pool", "input": "x"}, limited), 403, "forbidden")
    assert "not allowed to use model 'emb'" in denied["message"]


async def test_unknown_model_or_task_is_404(client: AsyncClient, token: str) -> None:
    openai_error(await embed(client, {"model": "nope", "input": "x"}, token), 404, "not_found")
    openai_error(await embed(client, {"model": "emb/nope", "input": "x"}, token), 404, "not_found")


async def test_no_worker_is_503_and_the_sdk_may_retry(client: AsyncClient, token: str) -> None:
    response = await embed(client, {"model": "emb", "input": "x"}, token)
    assert "no live worker" in openai_error(response, 503, "unavailable")["message"]
    assert not response.has_header("X-Should-Retry")


async def test_a_timeout_is_504_the_sdk_must_not_retry(client: AsyncClient, token: str,
                                                       worker_answers: list[dict[str, Any]],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    async def late(**kwargs: Any) -> InferenceResult:
        raise Timeout("no result within 1 s")

    monkeypatch.setattr(dispatch.handoff, "infer", late)
    response = await embed(client, {"model": "emb", "input": "x"}, token)
    openai_error(response, 504, "timeout")
    assert response["X-Should-Retry"] == "false"


async def test_get_is_405_with_allow(client: AsyncClient, token: str) -> None:
    response = await client.get("/v1/embeddings", headers={"Authorization": f"Bearer {token}"})
    openai_error(response, 405, "method_not_allowed")
    assert response["Allow"] == "POST"


async def test_models_lists_enabled_embedding_ids_the_token_may_use(
    client: AsyncClient, token: str, make_token: Callable[..., str]
) -> None:
    response = await client.get("/v1/models", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["emb", "emb/cls-pool"]  # not tokens, bert, or the disabled one
    assert all(m["object"] == "model" and m["created"] > 0 and m["owned_by"] for m in body["data"])
    bert = await sync_to_async(RegisteredModel.objects.get)(name="bert")
    limited = await sync_to_async(make_token)("bert-only", models=[bert])
    response = await client.get("/v1/models", headers={"Authorization": f"Bearer {limited}"})
    assert response.json()["data"] == []
    openai_error(await client.get("/v1/models"), 401, "unauthorized")
