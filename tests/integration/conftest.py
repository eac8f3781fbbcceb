"""Session fixtures: one real stack (Redis, database, runworker, uvicorn) for the tier."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import model_factory
from tests.stack import Stack

MINILM = "minilm"
MLM = "tiny-mlm"
CLS = "tiny-cls"
RANKER = "tiny-ranker"
MINILM_ORT = "minilm-ort"  # MiniLM with backend onnxruntime named explicitly


@pytest.fixture
def hub_online(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """InferenceClient refuses every call, even to 127.0.0.1, while HF_HUB_OFFLINE is on."""
    import huggingface_hub.constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # read once, at import
    yield


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny random-weight models built on disk for this run."""
    root = tmp_path_factory.mktemp("models")
    return {
        MLM: model_factory.build_masked_lm(root / "mlm"),
        CLS: model_factory.build_sequence_classifier(root / "cls"),
        RANKER: model_factory.build_cross_encoder(root / "ranker"),
    }


@pytest.fixture(scope="session")
def stack(tiny_models: dict[str, Path]) -> Iterator[Stack]:
    """The product running on loopback with four registered models and two tokens."""
    with Stack.started() as running:
        running.manage("register_model", MINILM, "--source", str(model_factory.minilm_path()),
                       "--task", "feature-extraction", "--pooling", "mean", "--normalize",
                       "--max-batch-size", "32", "--max-batch-delay-ms", "5", "--timeout", "60")
        running.manage("register_model", MLM, "--source", str(tiny_models[MLM]), "--task", "fill-mask",
                       "--max-batch-size", "8", "--timeout", "60")
        running.manage("register_model", CLS, "--source", str(tiny_models[CLS]), "--task", "text-classification",
                       "--max-batch-size", "8", "--timeout", "60")
        running.manage("register_model", RANKER, "--source", str(tiny_models[RANKER]), "--task", "text-ranking",
                       "--max-batch-size", "16", "--timeout", "60")
        running.manage("register_model", MINILM_ORT, "--source", str(model_factory.minilm_path()),
                       "--task", "feature-extraction", "--pooling", "mean", "--normalize", "--backend", "onnxruntime",
                       "--max-batch-size", "32", "--timeout", "60")
        running.create_token("all")
        running.create_token("cls-only", models=CLS)
        running.start_worker()
        running.start_web()
        running.wait_ready([MINILM, MLM, CLS, RANKER, MINILM_ORT])
        yield running


@pytest.fixture(scope="session")
def token(stack: Stack) -> str:
    """A token valid for every model."""
    return stack.tokens["all"]
