"""A decoder reranker (Qwen3-Reranker's hub layout) registered with no flags: /rerank and the HF route answer
sentence-transformers' CrossEncoder scores for the same directory."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests import reranker_layouts
from tests.stack import Stack, http_json

pytestmark = pytest.mark.integration

DECODER = "tiny-qwen3-reranker"
WORDS = ["river", "model", "server", "batch", "queue", "token", "vector", "worker", "answer", "redis", "garden"]
QUERY = "which worker answers the queue?"


@pytest.fixture(scope="module")
def texts() -> list[str]:
    rng = random.Random(7)  # mixed lengths, and one past the model's 512 positions
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40))) for _ in range(23)] + [" ".join(WORDS * 60)]


@pytest.fixture(scope="module")
def decoder(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reranker's directory, registered on the session stack as a user would: source and task, nothing else."""
    path = reranker_layouts.build_qwen3_reranker(tmp_path_factory.mktemp("decoder") / "qwen3-reranker")
    stack.manage("register_model", DECODER, "--source", str(path), "--task", "text-ranking")
    stack.wait_ready([DECODER])
    return path


@pytest.fixture(scope="module")
def raw(decoder: Path, texts: list[str]) -> list[float]:
    """logit(yes) - logit(no) of every (QUERY, text) pair, as sentence-transformers computes it in process."""
    import torch
    from sentence_transformers import CrossEncoder

    cross_encoder = CrossEncoder(str(decoder), device="cpu")
    return cross_encoder.predict([(QUERY, text) for text in texts], activation_fn=torch.nn.Identity()).tolist()


def sigmoid(value: float) -> float:
    import math

    return 1 / (1 + math.exp(-value))


def test_rerank_scores_are_sentence_transformers_own(stack: Stack, token: str, texts: list[str],
                                                     raw: list[float]) -> None:
    status, _, ranks = http_json("POST", f"{stack.url}/rerank", {
        "model": DECODER, "query": QUERY, "texts": texts, "return_text": True}, token=token, timeout=60)
    assert status == 200, ranks
    assert sorted(r["index"] for r in ranks) == list(range(len(texts)))
    assert [r["score"] for r in ranks] == sorted((r["score"] for r in ranks), reverse=True)
    for rank in ranks:
        assert rank["text"] == texts[rank["index"]]
        assert rank["score"] == pytest.approx(sigmoid(raw[rank["index"]]), abs=1e-3)
    status, _, ranks = http_json("POST", f"{stack.url}/rerank", {
        "model": DECODER, "query": QUERY, "texts": texts, "raw_scores": True}, token=token, timeout=60)
    assert status == 200, ranks
    assert {r["index"]: r["score"] for r in ranks} == pytest.approx(dict(enumerate(raw)), abs=1e-3)
    assert max(raw) - min(raw) > 1.0  # random weights still tell the texts apart


def test_the_hf_route_answers_the_same_scores(stack: Stack, token: str, texts: list[str], raw: list[float]) -> None:
    status, _, scores = http_json("POST", f"{stack.url}/models/{DECODER}", {
        "inputs": {"source_sentence": QUERY, "sentences": texts[:8]}}, token=token, timeout=60)
    assert status == 200, scores
    assert scores == pytest.approx([sigmoid(value) for value in raw[:8]], abs=1e-3)


def test_a_pair_over_the_model_with_truncate_false_is_refused(stack: Stack, token: str, texts: list[str]) -> None:
    status, _, body = http_json("POST", f"{stack.url}/rerank", {
        "model": DECODER, "query": QUERY, "texts": texts[-1:], "truncate": False}, token=token, timeout=60)
    assert status == 400 and body["error_type"] == "invalid_input", body
    assert "over the model's 512" in body["error"]
