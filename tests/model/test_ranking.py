"""The text-ranking runner: scores equal the cross-encoder's own, in pair order, whatever the batching."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from models_registry.core.batch_types import BatchPolicy, ItemFailure
from models_registry.core.errors import InvalidInput
from models_registry.catalog.specs import ModelSpec, TaskSpec
from tests import model_factory

torch = pytest.importorskip("torch")
from models_registry.inference.model_runner import PipelineRunner

WORDS = ["river", "model", "server", "batch", "queue", "token", "vector", "worker", "request", "answer", "redis"]


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return model_factory.build_cross_encoder(tmp_path_factory.mktemp("rank") / "ce")


@pytest.fixture(scope="module")
def loaded(cross_encoder: Path) -> tuple[PipelineRunner, object, TaskSpec]:
    task = TaskSpec(name="rank", task="text-ranking", parameters={}, pooling="mean", normalize=False,
                    policy=BatchPolicy(max_batch_size=64), timeout_s=30.0)
    spec = ModelSpec(name="ce", source=str(cross_encoder), revision="", device="cpu", dtype="float32", enabled=True,
                     tasks={"rank": task}, default_task="rank")
    runner = PipelineRunner(packing=False)
    return runner, runner.load(spec), task


def reference(path: Path, query: str, texts: list[str]) -> torch.Tensor:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForSequenceClassification.from_pretrained(str(path)).eval()
    with torch.inference_mode():
        return torch.stack([model(**tokenizer(query, text, truncation=True, return_tensors="pt")).logits[0, 0]
                            for text in texts])


def test_scores_are_the_models_own_in_pair_order(loaded: tuple, cross_encoder: Path) -> None:
    runner, model, task = loaded
    rng = random.Random(3)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 60))) for _ in range(40)]
    pairs = [{"query": "which worker answers?", "text": t} for t in texts]
    logits = reference(cross_encoder, "which worker answers?", texts)
    scores = runner.run(model, task, pairs, [{}] * len(pairs))
    raw = runner.run(model, task, pairs, [{"raw_scores": True}] * len(pairs))
    assert torch.allclose(torch.tensor(raw), logits, atol=1e-5)
    assert torch.allclose(torch.tensor(scores), torch.sigmoid(logits), atol=1e-6)
    assert len(set(scores)) > 30  # random weights still tell the texts apart


def test_truncate_false_fails_only_the_long_pair(loaded: tuple) -> None:
    runner, model, task = loaded
    pairs = [{"query": "q", "text": "short"}, {"query": "q", "text": "word " * 200}]
    outputs = runner.run(model, task, pairs, [{"truncate": False}] * 2)
    assert isinstance(outputs[0], float)
    assert isinstance(outputs[1], ItemFailure) and isinstance(outputs[1].error, InvalidInput)
    assert "over the model's 128" in outputs[1].error.message
    assert all(isinstance(x, float) for x in runner.run(model, task, pairs, [{}] * 2))  # truncated by default


def test_a_model_with_several_labels_is_refused_at_load(tmp_path: Path) -> None:
    path = model_factory.build_sequence_classifier(tmp_path / "two")
    task = TaskSpec(name="rank", task="text-ranking", parameters={}, pooling="mean", normalize=False,
                    policy=BatchPolicy(), timeout_s=30.0)
    spec = ModelSpec(name="two", source=str(path), revision="", device="cpu", dtype="float32", enabled=True,
                     tasks={"rank": task}, default_task="rank")
    with pytest.raises(ValueError, match="num_labels=1"):
        PipelineRunner(packing=False).load(spec)
