"""TEI's /rerank and /tokenize on the real stack: scores equal the cross-encoder's own, pairs batch like any list."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import MINILM, RANKER
from tests.stack import Stack, http_json

pytestmark = pytest.mark.integration

WORDS = ["river", "model", "server", "batch", "queue", "token", "vector", "worker", "answer", "redis", "garden"]
QUERY = "which worker answers the queue?"


@pytest.fixture(scope="module")
def texts() -> list[str]:
    rng = random.Random(5)
    return [f"{i} " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 30))) for i in range(100)]


@pytest.fixture(scope="module")
def expected(tiny_models: dict[str, Path], texts: list[str]) -> list[float]:
    """sigmoid(logit) of every (QUERY, text) pair, in process."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = str(tiny_models[RANKER])
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    with torch.inference_mode():
        encoded = tokenizer([QUERY] * len(texts), texts, padding=True, truncation=True, return_tensors="pt")
        return torch.sigmoid(model(**encoded).logits[:, 0]).tolist()


@pytest.fixture
def hub_online(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """InferenceClient refuses every call, even to 127.0.0.1, while HF_HUB_OFFLINE is on."""
    import huggingface_hub.constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    yield


def test_rerank_100_texts_split_across_batches_scores_the_models_own(stack: Stack, token: str, texts: list[str],
                                                                    expected: list[float]) -> None:
    status, headers, ranks = http_json("POST", f"{stack.url}/rerank", {
        "model": RANKER, "query": QUERY, "texts": texts, "return_text": True}, token=token, timeout=60)
    assert status == 200, ranks
    assert sorted(r["index"] for r in ranks) == list(range(100))
    scores = [r["score"] for r in ranks]
    assert scores == sorted(scores, reverse=True)
    for rank in ranks:
        assert rank["text"] == texts[rank["index"]]
        assert rank["score"] == pytest.approx(expected[rank["index"]], abs=1e-5)
    assert 1 <= int(headers["x-batch-size"]) <= 16  # max_batch_size 16: 100 pairs took several batches


def test_raw_scores_are_logits(stack: Stack, token: str, texts: list[str], expected: list[float]) -> None:
    import math

    status, _, ranks = http_json("POST", f"{stack.url}/rerank", {
        "model": f"{RANKER}/text-ranking", "query": QUERY, "texts": texts[:5], "raw_scores": True}, token=token)
    assert status == 200, ranks
    for rank in ranks:
        assert 1 / (1 + math.exp(-rank["score"])) == pytest.approx(expected[rank["index"]], abs=1e-5)


def test_inference_client_sentence_similarity_on_the_hf_route(stack: Stack, token: str, texts: list[str],
                                                               expected: list[float], hub_online: None) -> None:
    from huggingface_hub import InferenceClient

    client = InferenceClient(model=f"{stack.url}/models/{RANKER}", token=token)
    scores = client.sentence_similarity(QUERY, other_sentences=texts[:20])
    assert scores == pytest.approx(expected[:20], abs=1e-5)


def test_an_embedding_model_cannot_rerank(stack: Stack, token: str) -> None:
    status, _, body = http_json("POST", f"{stack.url}/rerank", {"model": MINILM, "query": "q", "texts": ["a"]},
                                token=token)
    assert status == 404 and body["error_type"] == "not_found" and "cannot serve /rerank" in body["error"]


def test_tokenize_the_served_model(stack: Stack, token: str) -> None:
    text = "Redis hands café orders to workers."
    status, _, body = http_json("POST", f"{stack.url}/tokenize", {"model": MINILM, "inputs": [text, "ok"]},
                                token=token)
    assert status == 200, body
    first, second = body
    assert first[0]["special"] and first[-1]["special"] and len(second) == 3
    assert all(text[t["start"]:t["stop"]] == t["text"] for t in first[1:-1])
    assert "café" in [t["text"] for t in first]


def test_both_routes_are_in_the_metrics(stack: Stack, token: str) -> None:
    http_json("POST", f"{stack.url}/tokenize", {"model": RANKER, "inputs": "a"}, token=token)
    http_json("POST", f"{stack.url}/rerank", {"model": RANKER, "query": "q", "texts": ["a"]}, token=token)
    _, _, text = http_json("GET", f"{stack.url}/metrics")
    assert f'hosting_inference_requests_total{{model="{RANKER}",status="200",task="text-ranking"}}' in text
    assert f'hosting_inference_requests_total{{model="{RANKER}",status="200",task="tokenize"}}' in text
