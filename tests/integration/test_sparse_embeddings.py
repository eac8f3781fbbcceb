"""A SPLADE model registered with no flags, on the real stack: POST /embed_sparse and the HF route answer the
non-zero entries sentence-transformers' SparseEncoder computes; dense routes and dense models refuse the other
kind; the token budget bounds the vocabulary-wide answer before compute."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import model_factory, sparse_layouts
from tests.stack import Stack, http_json

pytestmark = pytest.mark.integration

SPLADE = "splade"
TIGHT = "splade-tight"  # the same files, a task whose token budget is below four inputs' answers
DENSE = "dense"
WORDS = ["river", "model", "server", "batch", "queue", "token", "vector", "worker", "answer", "redis", "Paris"]
TEXTS = [" ".join(random.Random(i).choice(WORDS) for _ in range(random.Random(i).randint(1, 30))) for i in range(24)]


@pytest.fixture(scope="module")
def splade_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sparse_layouts.build_splade(tmp_path_factory.mktemp("sparse") / "splade", prompts={"query": "query: "})


@pytest.fixture(scope="module")
def stack(splade_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    dense_dir = model_factory.build_feature_extractor(tmp_path_factory.mktemp("dense") / "fe")
    with Stack.started() as running:
        running.manage("register_model", SPLADE, "--source", str(splade_dir), "--task", "feature-extraction",
                       "--max-batch-size", "8", "--timeout", "60")
        running.manage("register_model", TIGHT, "--source", str(splade_dir), "--task", "feature-extraction",
                       "--max-request-tokens", "100", "--timeout", "60")
        running.manage("register_model", DENSE, "--source", str(dense_dir), "--task", "feature-extraction",
                       "--timeout", "60")
        running.create_token("all")
        running.start_worker()
        running.start_web()
        running.wait_ready([SPLADE, TIGHT, DENSE])
        yield running


@pytest.fixture(scope="module")
def expected(splade_dir: Path) -> Any:
    from sentence_transformers import SparseEncoder

    model = SparseEncoder(str(splade_dir), device="cpu")
    return {name: model.encode(TEXTS, convert_to_sparse_tensor=False, prompt_name=name).numpy()
            for name in ("document", "query")}


def assert_entries(answer: list[list[dict[str, Any]]], expected: Any) -> None:
    """Each input's entries: the SparseEncoder's non-zero indices, in order, and their values within 1e-3.

    (1e-6 absolute for entries near zero: batches padded otherwise round float32 differently, by about 3e-8.)
    """
    assert len(answer) == len(expected)
    for entries, row in zip(answer, expected):
        assert [e["index"] for e in entries] == row.nonzero()[0].tolist()
        assert [e["value"] for e in entries] == pytest.approx(row[row.nonzero()[0]].tolist(), rel=1e-3, abs=1e-6)


def post(stack: Stack, path: str, body: Any) -> tuple[int, Any, Any]:
    status, headers, answer = http_json("POST", f"{stack.url}{path}", body, token=stack.tokens["all"], timeout=60)
    return status, headers, answer


def test_embed_sparse_answers_the_sparse_encoders_entries(stack: Stack, expected: Any) -> None:
    status, headers, answer = post(stack, "/embed_sparse", {"model": SPLADE, "inputs": TEXTS})
    assert status == 200, answer
    assert_entries(answer, expected["document"])
    assert 1 <= int(headers["x-batch-size"]) <= 8  # 24 inputs over batches of 8
    status, _, answer = post(stack, "/embed_sparse", {"model": SPLADE, "inputs": TEXTS[0], "prompt_name": "query"})
    assert status == 200 and len(answer) == 1  # one string: still a list per input
    assert_entries(answer, expected["query"][:1])


def test_the_hf_route_answers_the_same_entries(stack: Stack, expected: Any) -> None:
    status, _, answer = post(stack, f"/models/{SPLADE}", {"inputs": TEXTS[:5]})
    assert status == 200, answer
    assert_entries(answer, expected["document"][:5])
    status, _, one = post(stack, f"/models/{SPLADE}", {"inputs": TEXTS[3], "parameters": {"max_active_dims": 4}})
    assert status == 200 and len(one) == 4  # one string: its entries alone, its four largest
    top = sorted(range(len(expected["document"][3])), key=lambda i: -expected["document"][3][i])[:4]
    assert [e["index"] for e in one] == sorted(top)


def test_each_kind_of_model_refuses_the_other_kinds_route(stack: Stack) -> None:
    status, _, answer = post(stack, "/embed_sparse", {"model": DENSE, "inputs": "a"})
    assert (status, answer["error_type"]) == (400, "invalid_input") and "no sparse vectors" in answer["error"]
    status, _, answer = post(stack, "/v1/embeddings", {"model": SPLADE, "input": "a"})
    assert status == 400 and "sparse (SPLADE)" in answer["error"]["message"]
    status, _, dense = post(stack, f"/models/{DENSE}", {"inputs": "a"})
    assert status == 200 and len(dense) == 32  # the dense model's pooled vector, as before


def test_the_token_budget_bounds_the_answer_before_compute(stack: Stack) -> None:
    status, _, answer = post(stack, "/embed_sparse", {"model": TIGHT, "inputs": TEXTS[:2]})
    assert status == 200, answer  # 2 inputs x 1024 entries x 36 bytes: 72 tokens of answer, under 100
    status, _, answer = post(stack, "/embed_sparse", {"model": TIGHT, "inputs": TEXTS[:4]})
    assert (status, answer["error_type"]) == (413, "too_large") and "max_request_tokens" in answer["error"]
    status, _, answer = post(stack, f"/models/{SPLADE}", {"inputs": TEXTS[:16], "parameters": {
        "max_active_dims": 30_522}})  # a whole vocabulary per input: 17 MB of JSON
    assert (status, answer["error_type"]) == (413, "too_large") and "HOSTING_MAX_ANSWER_BYTES" in answer["error"]
