"""A model registered with backend onnxruntime serves through ONNX Runtime and answers torch's vectors."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from tests.integration.common import MiniLMReference, post_many, sentences
from tests.integration.conftest import MINILM_ORT
from tests.stack import Stack, http_json

pytestmark = [pytest.mark.integration, pytest.mark.one_phase]


def test_onnxruntime_model_answers_the_torch_vectors(stack: Stack, token: str) -> None:
    status, _, detail = http_json("GET", f"{stack.url}/models/{MINILM_ORT}", token=token)
    assert status == 200
    assert detail["backend"] == "onnxruntime" and detail["active_backend"] == "onnxruntime"
    assert [w["backend"] for w in detail["workers"]] == ["onnxruntime"] * len(detail["workers"])
    texts = sentences(40, seed=13) + ["ok", " ".join(["long"] * 600)]  # one of one token, one truncated
    answers = asyncio.run(post_many(f"{stack.url}/models/{MINILM_ORT}", token, texts, concurrency=16))
    assert [a.status for a in answers] == [200] * len(texts)
    got = np.array([a.body for a in answers], dtype=np.float32)
    want = MiniLMReference()(texts)
    np.testing.assert_allclose(got, want, atol=2e-5)
