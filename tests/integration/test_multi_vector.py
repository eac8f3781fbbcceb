"""ColBERT-style models registered with no flags answer MultiVectorEncoder's token vectors and MaxSim over HTTP.

The real stack (Redis, runworker, uvicorn) serves tiny random models laid out as a PyLate save and as a
sentence-transformers 6.2 MultiVectorEncoder save (tests/colbert_layouts.py); the reference is
MultiVectorEncoder on the same directories.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests import colbert_layouts
from tests.model.test_multi_vector import assert_same_token_vectors
from tests.stack import Stack, http_json

pytestmark = pytest.mark.integration
sentence_transformers = pytest.importorskip("sentence_transformers")

SERVED = ("pylate", "mve-min")
QUERY = "Which worker answers the queue?"
TEXTS = ["The worker answers the queue, batch by batch.", "a short one", "Paris is the capital of France!"]


@pytest.fixture(scope="module")
def layout_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("served-colbert")
    return {name: colbert_layouts.build(colbert_layouts.LAYOUTS[name], root / name) for name in SERVED}


@pytest.fixture(scope="module")
def colbert(layout_dirs: dict[str, Path]) -> Iterator[Stack]:
    with Stack.serving(layout_dirs) as running:
        yield running


@pytest.mark.parametrize("name", SERVED)
def test_the_hf_route_answers_query_and_document_token_vectors(colbert: Stack, layout_dirs: dict[str, Path],
                                                               name: str) -> None:
    reference = sentence_transformers.MultiVectorEncoder(str(layout_dirs[name]), device="cpu")
    for prompt_name, expected in (("query", reference.encode_query(TEXTS)), (None, reference.encode_document(TEXTS))):
        body = {"inputs": TEXTS, **({"prompt_name": prompt_name} if prompt_name else {})}
        status, _, vectors = http_json("POST", f"{colbert.url}/models/{name}", body, token=colbert.tokens["all"])
        assert status == 200, vectors
        assert_same_token_vectors([np.asarray(v, dtype=np.float32) for v in vectors], expected)


@pytest.mark.parametrize("name", SERVED)
def test_rerank_answers_maxsim_best_first(colbert: Stack, layout_dirs: dict[str, Path], name: str) -> None:
    reference = sentence_transformers.MultiVectorEncoder(str(layout_dirs[name]), device="cpu")
    want = reference.similarity(reference.encode_query([QUERY]), reference.encode_document(TEXTS))[0].tolist()
    status, _, ranks = http_json("POST", f"{colbert.url}/rerank", {"model": name, "query": QUERY, "texts": TEXTS},
                                 token=colbert.tokens["all"])
    assert status == 200, ranks
    assert [rank["index"] for rank in ranks] == sorted(range(len(TEXTS)), key=lambda i: -want[i])
    assert [rank["score"] for rank in ranks] == pytest.approx(sorted(want, reverse=True), abs=1e-3)


def test_openai_embeddings_refuse_a_model_without_one_vector(colbert: Stack) -> None:
    status, _, answer = http_json("POST", f"{colbert.url}/v1/embeddings", {"model": "pylate", "input": "x"},
                                  token=colbert.tokens["all"])
    assert status == 400 and "one vector per token" in answer["error"]["message"]
