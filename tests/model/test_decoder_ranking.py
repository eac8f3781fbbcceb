"""Decoder rerankers on the text-ranking runner: scores equal sentence-transformers' CrossEncoder on the same directory.

Each directory is laid out as sentence-transformers 6 publishes one (tests/reranker_layouts.py): the
pairs mix lengths (so a batch is left-padded) and one renders past the model's 512 positions (so it
is cut, and the template's tail written back).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from models_registry.catalog.specs import ModelSpec, TaskSpec
from models_registry.core.batch_types import BatchPolicy, ItemFailure
from models_registry.core.errors import InvalidInput
from tests import reranker_layouts

torch = pytest.importorskip("torch")
sentence_transformers = pytest.importorskip("sentence_transformers")
from models_registry.inference.model_runner import PipelineRunner

WORDS = ["river", "model", "server", "batch", "queue", "token", "vector", "worker", "request", "answer", "redis"]
QUERY = "which worker answers?"
BUILDERS: dict[str, Callable[[Path], Path]] = {
    "qwen3-reranker": reranker_layouts.build_qwen3_reranker,
    "one-token": reranker_layouts.build_one_token_reranker,
    "no-st-files": reranker_layouts.build_plain_causal_reranker,
    "pre-message": reranker_layouts.build_pre_message_reranker,
}


def texts() -> list[str]:
    rng = random.Random(3)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 60))) for _ in range(30)] + [" ".join(WORDS * 60)]


def rank_task() -> TaskSpec:
    return TaskSpec(name="rank", task="text-ranking", parameters={}, pooling="mean", normalize=False,
                    policy=BatchPolicy(max_batch_size=64), timeout_s=30.0)


def load(path: Path) -> tuple[PipelineRunner, object, TaskSpec]:
    task = rank_task()
    spec = ModelSpec(name=path.name, source=str(path), revision="", device="cpu", dtype="float32", enabled=True,
                     tasks={"rank": task}, default_task="rank")
    runner = PipelineRunner(packing=False)
    return runner, runner.load(spec), task


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def reranker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    return request.param, BUILDERS[request.param](tmp_path_factory.mktemp("decoder") / request.param)


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return reranker_layouts.build_qwen3_reranker(tmp_path_factory.mktemp("decoder") / "qwen3")


def test_scores_are_sentence_transformers_own(reranker: tuple[str, Path]) -> None:
    name, path = reranker
    cross_encoder = sentence_transformers.CrossEncoder(str(path), device="cpu")
    pairs = [(QUERY, text) for text in texts()]
    raw = torch.tensor(cross_encoder.predict(pairs, activation_fn=torch.nn.Identity()))
    runner, model, task = load(path)
    items = [{"query": query, "text": text} for query, text in pairs]
    ours_raw = torch.tensor(runner.run(model, task, items, [{"raw_scores": True}] * len(items)))
    ours = torch.tensor(runner.run(model, task, items, [{}] * len(items)))
    assert torch.allclose(ours_raw, raw, atol=1e-3), (ours_raw - raw).abs().max()
    assert torch.allclose(ours, torch.sigmoid(raw), atol=1e-3)
    assert float(raw.max() - raw.min()) > 1.0  # random weights still tell the pairs apart
    if name == "qwen3-reranker":  # its files' activation is Identity: predict as published is the raw difference
        assert torch.allclose(ours_raw, torch.tensor(cross_encoder.predict(pairs)), atol=1e-3)


def test_truncate_false_fails_only_the_pair_over_the_model(qwen3: Path) -> None:
    runner, model, task = load(qwen3)
    pairs = [{"query": QUERY, "text": "short"}, {"query": QUERY, "text": " ".join(WORDS * 60)}]
    outputs = runner.run(model, task, pairs, [{"truncate": False}] * 2)
    assert isinstance(outputs[0], float)
    assert isinstance(outputs[1], ItemFailure) and isinstance(outputs[1].error, InvalidInput)
    assert "over the model's 512" in outputs[1].error.message


def test_a_logit_score_over_a_classifier_transformer_is_refused_at_load(qwen3: Path, tmp_path: Path) -> None:
    broken = tmp_path / "classifier-task"
    broken.mkdir()
    for source in qwen3.rglob("*"):
        if source.is_file():
            (broken / source.relative_to(qwen3)).parent.mkdir(parents=True, exist_ok=True)
            (broken / source.relative_to(qwen3)).write_bytes(source.read_bytes())
    (broken / "sentence_bert_config.json").write_text('{"transformer_task": "sequence-classification"}')
    with pytest.raises(ValueError, match="'sequence-classification' is not served"):
        load(broken)
    (broken / "sentence_bert_config.json").write_text('{"transformer_task": "text-generation", "modality_config": '
                                                       '{"message": {"method": "forward", "format": "flat"}}}')
    (broken / "chat_template.jinja").write_text("{{ messages[0].content }}")
    with pytest.raises(ValueError, match="does not render the document"):
        load(broken)
