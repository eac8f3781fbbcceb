"""POST /rerank: TEI's request and answer around a text-ranking task (the worker's scores stubbed)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from models_registry.broker.handoff import InferenceResult
from models_registry.core.errors import Timeout
from models_registry.models import RegisteredModel
from models_registry.policy import dispatch, serving
from tests.asgi_client import AsyncClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens")]


@pytest.fixture
def token(make_model: Callable[..., RegisteredModel], make_token: Callable[..., str]) -> str:
    ranker = make_model("ranker", task="text-ranking", parameters={"truncation_direction": "left"})
    ranker.tasks.create(name="raw", task="text-ranking", parameters={"raw_scores": True})
    mixed = make_model("mixed", task="feature-extraction")
    mixed.tasks.create(name="rank", task="text-ranking")
    make_model("emb", task="feature-extraction")
    colbert = {"kind": "MultiVectorEncoder", "pooling": ["none"], "prompts": {"query": "[Q] ", "document": "[D] "},
               "multi_vector": {"config": {}, "transformer": {}, "mask": {}}}  # what a MultiVectorEncoder's files say
    make_model("colbert", task="feature-extraction", file_settings=colbert)
    return make_token("all")


@pytest.fixture
def calls(stub_worker: Callable[..., list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The worker scores a pair by its text's length (a different score per text)."""

    def answer(kwargs: dict[str, Any]) -> InferenceResult:
        return InferenceResult(outputs=[len(pair["text"]) / 100 for pair in kwargs["inputs"]], queue_ms=2.0,
                               compute_ms=3.0, batch_size=4)

    return stub_worker(answer)


async def rerank(body: Any, token: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return await AsyncClient().post("/rerank", data=json.dumps(body), content_type="application/json",
                                    headers=headers)


async def test_ranks_best_first_with_the_pairs_as_items(token: str, calls: list[dict[str, Any]]) -> None:
    texts = ["ab", "abcdef", "abcd"]
    response = await rerank({"model": "ranker", "query": "q", "texts": texts}, token)
    assert response.status_code == 200, response.content
    assert response.json() == [{"index": 1, "score": 0.06}, {"index": 2, "score": 0.04}, {"index": 0, "score": 0.02}]
    [call] = calls
    assert call["inputs"] == [{"query": "q", "text": t} for t in texts]
    assert call["task"] == "text-ranking" and call["parameters"] == {"truncation_direction": "left"}
    assert response["X-Batch-Size"] == "4" and response["X-Queue-Time-Ms"] == "2.00"


async def test_return_text_raw_scores_and_truncation(token: str, calls: list[dict[str, Any]]) -> None:
    response = await rerank({"model": "ranker/raw", "query": "q", "texts": ["a", "abc"], "return_text": True,
                             "truncate": False, "truncation_direction": "right"}, token)
    assert response.json()[0] == {"index": 1, "score": 0.03, "text": "abc"}
    assert calls[0]["task"] == "raw"
    assert calls[0]["parameters"] == {"raw_scores": True, "truncate": False, "truncation_direction": "right"}


async def test_raw_scores_from_the_task_default(token: str, calls: list[dict[str, Any]]) -> None:
    await rerank({"model": "ranker/raw", "query": "q", "texts": ["a"]}, token)
    assert calls[0]["parameters"]["raw_scores"] is True
    await rerank({"model": "ranker/raw", "query": "q", "texts": ["a"], "raw_scores": False}, token)
    assert calls[1]["parameters"]["raw_scores"] is False  # the request's choice over the task's


async def test_a_model_whose_default_task_is_another_uses_its_ranking_task(token: str,
                                                                          calls: list[dict[str, Any]]) -> None:
    assert (await rerank({"model": "mixed", "query": "q", "texts": ["a"]}, token)).status_code == 200
    assert calls[0]["task"] == "rank"


async def test_ties_keep_input_order(token: str, calls: list[dict[str, Any]]) -> None:
    response = await rerank({"model": "ranker", "query": "q", "texts": ["xx", "yy", "zz"]}, token)
    assert [rank["index"] for rank in response.json()] == [0, 1, 2]


async def test_a_multi_vector_model_ranks_on_its_feature_extraction_task(token: str,
                                                                         calls: list[dict[str, Any]]) -> None:
    """A ColBERT-style model (what its files said at registration) is scored by MaxSim in the worker."""
    response = await rerank({"model": "colbert", "query": "q", "texts": ["ab", "abcd"], "raw_scores": True}, token)
    assert response.status_code == 200, response.content
    assert [rank["index"] for rank in response.json()] == [1, 0]
    [call] = calls
    assert call["task"] == "feature-extraction" and call["inputs"] == [{"query": "q", "text": t} for t in ("ab", "abcd")]
    assert call["parameters"]["prompts"] == {"query": "[Q] ", "document": "[D] "}  # the worker's query and text sides


@pytest.mark.parametrize(("body", "status", "words"), [
    ({"model": "emb", "query": "q", "texts": ["a"]}, 404, "cannot serve /rerank"),
    ({"model": "mixed/feature-extraction", "query": "q", "texts": ["a"]}, 404, "cannot serve /rerank"),
    ({"model": "nope", "query": "q", "texts": ["a"]}, 404, "no model named"),
    ({"query": "q", "texts": ["a"]}, 400, "'model' is required"),
    ({"model": "ranker", "texts": ["a"]}, 400, "'query' is required"),
    ({"model": "ranker", "query": "q", "texts": []}, 400, "must not be an empty list"),
    ({"model": "ranker", "query": "q", "texts": "a"}, 400, "must be a list of strings"),
    ({"model": "ranker", "query": "q", "texts": ["a", None]}, 400, "texts[1] must be a string"),
    ({"model": "ranker", "query": "q", "texts": ["a"], "raw_scores": 1}, 400, "true or false"),
    ({"model": "ranker", "query": "q", "texts": ["a"], "truncate": "no"}, 400, "true or false"),
    ({"model": "ranker", "query": "q", "texts": ["a"], "truncation_direction": "up"}, 400, "left or right"),
    ({"model": "ranker", "query": "q", "texts": ["a"], "top_n": 2}, 400, "unknown field(s) top_n"),
])
async def test_bad_requests_are_clear_and_never_reach_a_worker(token: str, calls: list[dict[str, Any]],
                                                               body: Any, status: int, words: str) -> None:
    response = await rerank(body, token)
    assert response.status_code == status and words in response.json()["error"], response.content
    assert not calls


async def test_too_many_texts_is_413(token: str, calls: list[dict[str, Any]], settings: Any) -> None:
    settings.HOSTING_MAX_INPUTS = 3
    response = await rerank({"model": "ranker", "query": "q", "texts": ["a"] * 4}, token)
    assert response.status_code == 413 and response.json()["error_type"] == "too_large"


async def test_worker_errors_pass_through(token: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def serves(spec: Any, task: str, wire: str, workers: Any) -> float:
        return 0.0

    async def late(**kwargs: Any) -> InferenceResult:
        raise Timeout("no result within 30 s")

    monkeypatch.setattr(serving, "serving_rate", serves)
    monkeypatch.setattr(dispatch.handoff, "infer", late)
    response = await rerank({"model": "ranker", "query": "q", "texts": ["a"]}, token)
    assert response.status_code == 504 and response.json() == {"error": "no result within 30 s",
                                                               "error_type": "timeout"}


async def test_no_live_worker_is_503(token: str) -> None:
    response = await rerank({"model": "ranker", "query": "q", "texts": ["a"]}, token)
    assert response.status_code == 503 and response.json()["error_type"] == "unavailable"


async def test_needs_a_token(token: str) -> None:
    assert (await rerank({"model": "ranker", "query": "q", "texts": ["a"]})).status_code == 401
