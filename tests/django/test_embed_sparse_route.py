"""POST /embed_sparse and the HF route over a sparse (SPLADE) task, and the dense routes' refusals (worker stubbed)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

import pytest

from models_registry.api.shapes import response_schemas
from models_registry.broker.handoff import InferenceResult
from models_registry.catalog.sparse_answer import SparseVector
from models_registry.core.model_layout import ModelLayout
from models_registry.models import RegisteredModel
from models_registry.tasks.shape_errors import adapter
from tests.asgi_client import AsyncClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens")]

SPLADE = ModelLayout(kind="SparseEncoder", modules=("MLMTransformer", "SpladePooling"), transformer_task="fill-mask",
                     splade={"pooling_strategy": "max", "activation_function": "relu"}, normalize=False)


@pytest.fixture
def token(make_model: Callable[..., RegisteredModel], make_token: Callable[..., str]) -> str:
    make_model("splade", task="feature-extraction", file_settings=SPLADE.to_json())
    mixed = make_model("mixed", task="feature-extraction")  # its default task is dense, a named one sparse
    mixed.tasks.create(name="sparse", task="feature-extraction", file_settings=SPLADE.to_json())
    make_model("emb", task="feature-extraction")
    return make_token("all")


def vector(position: int) -> dict[str, bytes]:
    """The worker's answer for the input at position: two entries, told apart by position."""
    return SparseVector(struct.pack("<2I", position, 1000 + position), struct.pack("<2f", 0.5, 0.25)).to_wire()


@pytest.fixture
def calls(stub_worker: Callable[..., list[dict[str, Any]]]) -> list[dict[str, Any]]:
    def answer(kwargs: dict[str, Any]) -> InferenceResult:
        return InferenceResult(outputs=[vector(i) for i, _ in enumerate(kwargs["inputs"])], queue_ms=1.0,
                               compute_ms=2.0, batch_size=len(kwargs["inputs"]))

    return stub_worker(answer)


def entries(position: int) -> list[dict[str, Any]]:
    return [{"index": position, "value": 0.5}, {"index": 1000 + position, "value": 0.25}]


async def post(path: str, body: Any, token: str) -> Any:
    return await AsyncClient().post(path, data=json.dumps(body), content_type="application/json",
                                    headers={"Authorization": f"Bearer {token}"})


async def test_each_input_is_answered_with_its_entries_in_teis_shape(token: str, calls: list[dict[str, Any]]) -> None:
    response = await post("/embed_sparse", {"model": "splade", "inputs": ["a", "b"], "truncate": False,
                                            "truncation_direction": "Left", "prompt_name": "query"}, token)
    assert response.status_code == 200, response.content
    assert response.json() == [entries(0), entries(1)]
    adapter(response_schemas.EmbedSparseResponse).validate_python(response.json())
    [call] = calls
    assert call["inputs"] == ["a", "b"] and call["task"] == "feature-extraction"
    assert call["parameters"] == {"truncate": False, "truncation_direction": "Left", "prompt_name": "query",
                                  "prompts": {"query": "", "document": ""}}  # the task's: sentence-transformers' own
    assert response["X-Batch-Size"] == "2"
    one = await post("/embed_sparse", {"model": "splade", "inputs": "a"}, token)
    assert one.json() == [entries(0)]  # a list per input, even for one string (TEI's)


async def test_the_sparse_task_of_a_model_is_found_or_named(token: str, calls: list[dict[str, Any]]) -> None:
    assert (await post("/embed_sparse", {"model": "mixed", "inputs": "a"}, token)).status_code == 200
    assert (await post("/embed_sparse", {"model": "mixed/sparse", "inputs": "a"}, token)).status_code == 200
    assert [call["task"] for call in calls] == ["sparse", "sparse"]


@pytest.mark.parametrize(("model", "says"), [
    ("emb", "computes no sparse vectors"),
    ("mixed/feature-extraction", "dense feature-extraction task, not a sparse"),
])
async def test_a_dense_model_is_a_clear_400(token: str, calls: list[dict[str, Any]], model: str, says: str) -> None:
    response = await post("/embed_sparse", {"model": model, "inputs": "a"}, token)
    assert response.status_code == 400 and response.json()["error_type"] == "invalid_input"
    assert says in response.json()["error"] and "/embed_sparse" in response.json()["error"]
    assert calls == []


async def test_bodies_it_does_not_take(token: str, calls: list[dict[str, Any]]) -> None:
    for body, status, says in [
        ({"model": "splade", "inputs": "a", "normalize": True}, 400, "unknown field(s) normalize"),
        ({"model": "splade", "inputs": []}, 400, "must not be an empty list"),
        ({"inputs": "a"}, 400, "'model' is required"),
        ({"model": "nope", "inputs": "a"}, 404, "no model named 'nope'"),
    ]:
        response = await post("/embed_sparse", body, token)
        assert (response.status_code, says in response.json()["error"]) == (status, True), response.json()
    assert calls == []


async def test_the_hf_route_answers_a_list_of_entries_per_input(token: str, calls: list[dict[str, Any]]) -> None:
    many = await post("/models/splade", {"inputs": ["a", "b"], "parameters": {"max_active_dims": 2}}, token)
    assert many.status_code == 200, many.content
    assert many.json() == [entries(0), entries(1)]
    one = await post("/models/splade", {"inputs": "a", "prompt_name": "query"}, token)
    assert one.json() == entries(0)  # one string: its answer alone, as for dense vectors
    assert calls[0]["parameters"]["max_active_dims"] == 2 and calls[1]["parameters"]["prompt_name"] == "query"


@pytest.mark.parametrize(("path", "body", "says"), [
    ("/models/splade", {"inputs": "a", "dimensions": 8}, "dimensions do(es) not apply to a sparse"),
    ("/models/splade", {"inputs": "a", "normalize": True}, "normalize do(es) not apply to a sparse"),
    ("/models/emb", {"inputs": "a", "parameters": {"max_active_dims": 8}}, "applies to sparse (SPLADE) models only"),
])
async def test_what_the_other_kind_of_vector_takes_is_a_400(token: str, calls: list[dict[str, Any]], path: str,
                                                            body: Any, says: str) -> None:
    response = await post(path, body, token)
    assert response.status_code == 400 and says in response.json()["error"], response.json()
    assert calls == []


async def test_openai_embeddings_are_dense_so_a_sparse_model_is_refused(token: str,
                                                                       calls: list[dict[str, Any]]) -> None:
    response = await post("/v1/embeddings", {"model": "splade", "input": "a"}, token)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "model" and "sparse (SPLADE)" in error["message"] and "/embed_sparse" in error["message"]
    assert calls == []
    listed = await AsyncClient().get("/v1/models", headers={"Authorization": f"Bearer {token}"})
    assert {m["id"] for m in listed.json()["data"]} == {"mixed", "emb"}  # no sparse id among the embedding ids


async def test_the_models_own_document_says_what_each_kind_of_vector_takes(token: str) -> None:
    import jsonschema_rs

    doc = (await AsyncClient().get("/api/openapi.json", headers={"Authorization": f"Bearer {token}"})).json()

    def accepts(path: str, body: Any) -> bool:
        schema = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        return jsonschema_rs.validator_for({**schema, "components": doc["components"]}).is_valid(body)

    assert accepts("/models/splade", {"inputs": "a", "parameters": {"max_active_dims": 8}})
    assert not accepts("/models/splade", {"inputs": "a", "dimensions": 8})
    assert not accepts("/models/splade", {"inputs": "a", "normalize": True})
    assert accepts("/models/emb", {"inputs": "a", "dimensions": 8})
    assert not accepts("/models/emb", {"inputs": "a", "parameters": {"max_active_dims": 8}})
    assert "SparseValue" in doc["paths"]["/models/splade"]["post"]["description"]
    for body, valid in [({"model": "splade", "inputs": "a", "prompt_name": "query"}, True),
                        ({"model": "splade", "inputs": "a", "prompt_name": "passage"}, False),  # not its prompt
                        ({"model": "mixed", "inputs": "a"}, True), ({"model": "mixed/sparse", "inputs": "a"}, True),
                        ({"model": "mixed/feature-extraction", "inputs": "a"}, False),  # dense: a 400
                        ({"model": "emb", "inputs": "a"}, False), ({"model": "nope", "inputs": "a"}, True)]:  # 404
        assert accepts("/embed_sparse", body) == valid, body
