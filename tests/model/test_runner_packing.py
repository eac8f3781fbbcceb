"""Packed embedding batches give the same vectors as padded ones, and packing switches itself off where it would not."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from models_registry.core.batch_types import BatchPolicy
from models_registry.catalog.specs import ModelSpec, TaskSpec
from tests import model_factory

torch = pytest.importorskip("torch")
from models_registry.inference.model_runner import PipelineRunner  # noqa: E402
from models_registry.inference.packed_forward import EagerEncoder, packed_position_offset  # noqa: E402
from models_registry.inference.trace import TracedEncoder  # noqa: E402

WORDS = "the model server packs short and long sentences into rows so no compute goes to padding".split()


def _spec(source: Path, pooling: str = "mean", normalize: bool = True) -> ModelSpec:
    task = TaskSpec(name="embed", task="feature-extraction", parameters={}, pooling=pooling, normalize=normalize,
                    policy=BatchPolicy(max_batch_size=64), timeout_s=30.0)
    return ModelSpec(name="m", source=str(source), revision="", device="cpu", dtype="float32", enabled=True,
                     tasks={"embed": task}, default_task="embed")


def _sentences() -> list[str]:
    rng = random.Random(11)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40))) for _ in range(45)]
    texts.append(" ".join(WORDS * 12))  # longer than a packed row
    texts.append(" ".join(WORDS * 60))  # truncated at the model's 512 tokens
    return texts


def _arrays(outputs: list) -> list[np.ndarray]:
    return [np.frombuffer(raw, dtype="<f4").reshape(shape) for raw, shape in outputs]


@pytest.mark.parametrize("pooling", ["mean", "cls", "none"])
def test_packed_minilm_batches_equal_padded_batches(pooling: str) -> None:
    spec = _spec(model_factory.minilm_path(), pooling=pooling)
    packed_runner, padded_runner = PipelineRunner(packing=True, torchscript=False), PipelineRunner(packing=False)
    packed, padded = packed_runner.load(spec), padded_runner.load(spec)
    assert packed.pack_position_offset == 0
    assert padded.pack_position_offset is None
    texts = _sentences()
    task = spec.tasks["embed"]
    got = _arrays(packed_runner.run(packed, task, texts, [{}] * len(texts)))
    want = _arrays(padded_runner.run(padded, task, texts, [{}] * len(texts)))
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=2e-5)


def test_packed_vectors_equal_each_input_run_alone() -> None:
    spec = _spec(model_factory.minilm_path(), normalize=False)
    runner = PipelineRunner(packing=True)
    loaded = runner.load(spec)
    texts = _sentences()[:12]
    task = spec.tasks["embed"]
    together = _arrays(runner.run(loaded, task, texts, [{}] * len(texts)))
    alone = [_arrays(runner.run(loaded, task, [t], [{}]))[0] for t in texts]
    for g, w in zip(together, alone):
        np.testing.assert_allclose(g, w, atol=2e-5)


def test_random_weight_bert_packs(tmp_path: Path) -> None:
    source = model_factory.build_masked_lm(tmp_path / "mlm")
    runner = PipelineRunner(packing=True)
    loaded = runner.load(_spec(source))
    assert loaded.pack_position_offset == 0


def test_causal_model_keeps_padded_batches(tmp_path: Path) -> None:
    """A block-diagonal bidirectional mask would change GPT-2's outputs: the load-time check refuses it."""
    source = model_factory.build_tiny_gpt2(tmp_path / "gpt2")
    runner = PipelineRunner(packing=True)
    loaded = runner.load(_spec(source))
    assert loaded.pack_position_offset is None
    pipe = loaded.pipelines["feature-extraction"]
    assert packed_position_offset(pipe.model, pipe.tokenizer) is None
    outputs = runner.run(loaded, _spec(source).tasks["embed"], ["one two", "three"], [{}, {}])
    assert all(isinstance(o, list) for o in outputs)


def test_small_cpu_forwards_run_on_one_thread_and_restore_the_setting() -> None:
    from models_registry.inference.task_common import SMALL_FORWARD_TOKENS, cpu_threads_for

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with cpu_threads_for(SMALL_FORWARD_TOKENS - 1, torch.device("cpu")):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with cpu_threads_for(SMALL_FORWARD_TOKENS, torch.device("cpu")):
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_torchscript_encoder_gives_the_eager_vectors() -> None:
    spec = _spec(model_factory.minilm_path())
    traced_runner, eager_runner = PipelineRunner(torchscript=True), PipelineRunner(torchscript=False)
    traced, eager = traced_runner.load(spec), eager_runner.load(spec)
    assert isinstance(traced.packed_encoder, TracedEncoder)
    assert isinstance(eager.packed_encoder, EagerEncoder)
    texts = _sentences()
    task = spec.tasks["embed"]
    got = _arrays(traced_runner.run(traced, task, texts, [{}] * len(texts)))
    want = _arrays(eager_runner.run(eager, task, texts, [{}] * len(texts)))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=2e-5)


def test_a_model_without_token_types_keeps_its_eager_forward(tmp_path: Path) -> None:
    from models_registry.inference import trace

    source = model_factory.build_tiny_gpt2(tmp_path / "gpt2")
    loaded = PipelineRunner(packing=False).load(_spec(source))
    pipe = loaded.pipelines["feature-extraction"]
    assert trace.trace_packed_encoder(pipe.model, pipe.tokenizer, 0) is None


def test_truncation_side_is_honoured_by_the_packed_path() -> None:
    spec = _spec(model_factory.minilm_path())
    packed_runner, padded_runner = PipelineRunner(), PipelineRunner(packing=False)
    packed, padded = packed_runner.load(spec), padded_runner.load(spec)
    task = spec.tasks["embed"]
    long_text = "first words matter here " + " ".join(WORDS * 60) + " but the end is different"
    left, right = ({"truncation_direction": side} for side in ("left", "right"))
    got_left, got_right = _arrays(packed_runner.run(packed, task, [long_text, long_text], [left, right]))
    want_left, want_right = _arrays(padded_runner.run(padded, task, [long_text, long_text], [left, right]))
    np.testing.assert_allclose(got_left, want_left, atol=2e-5)
    np.testing.assert_allclose(got_right, want_right, atol=2e-5)
    assert not np.allclose(got_left, got_right, atol=1e-3)
