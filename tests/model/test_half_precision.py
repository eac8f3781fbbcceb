"""dtype auto's probe on real models: bfloat16 tried on the CPU (the internal switch CUDA has on by default)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from models_registry.core.batch_types import BatchPolicy
from models_registry.catalog.specs import ModelSpec, TaskSpec
from tests import model_factory

torch = pytest.importorskip("torch")
from models_registry.inference import half_precision  # noqa: E402
from models_registry.inference.model_runner import PipelineRunner  # noqa: E402


def _spec(source: Path, task: str = "feature-extraction", dtype: str = "auto") -> ModelSpec:
    spec_task = TaskSpec(name="t", task=task, parameters={}, pooling="mean", normalize=True,
                         policy=BatchPolicy(max_batch_size=64), timeout_s=30.0)
    return ModelSpec(name="m", source=str(source), revision="", device="cpu", dtype=dtype, enabled=True,
                     tasks={"t": spec_task}, default_task="t")


def _vectors(outputs: list) -> np.ndarray:
    return np.stack([np.frombuffer(raw, dtype="<f4").reshape(shape) for raw, shape in outputs])


def test_auto_serves_minilm_in_bfloat16_when_its_vectors_match_float32() -> None:
    spec = _spec(model_factory.minilm_path())
    half_runner = PipelineRunner(torchscript=False, half_dtypes=("bfloat16",))
    half = half_runner.load(spec)
    assert half.pipelines["feature-extraction"].model.dtype == torch.bfloat16
    assert half.backend["active_dtype"] == "bfloat16"
    assert half.backend["half_min_cosine"] >= half_precision.MIN_COSINE
    assert "matches float32" in half.backend["dtype_reason"]
    assert half.pack_position_offset == 0  # the packing check ran on the half model and still packs
    full_runner = PipelineRunner(torchscript=False)
    full = full_runner.load(spec)
    assert full.backend["active_dtype"] == "float32" and "CUDA only" in full.backend["dtype_reason"]
    texts = ["Hello there.", "A somewhat longer sentence about serving models on a GPU.", "ok"]
    got = _vectors(half_runner.run(half, spec.tasks["t"], texts, [{}] * 3))
    want = _vectors(full_runner.run(full, spec.tasks["t"], texts, [{}] * 3))
    assert (got * want).sum(axis=1).min() >= 0.999


def test_an_explicit_dtype_is_never_probed() -> None:
    loaded = PipelineRunner(torchscript=False, half_dtypes=("bfloat16",)).load(
        _spec(model_factory.minilm_path(), dtype="float32"))
    assert loaded.pipelines["feature-extraction"].model.dtype == torch.float32
    assert "active_dtype" not in loaded.backend


def test_a_classifier_keeps_half_precision_only_with_every_label_unchanged(tmp_path: Path) -> None:
    source = model_factory.build_sequence_classifier(tmp_path / "cls")
    loaded = PipelineRunner(half_dtypes=("bfloat16",)).load(_spec(source, task="text-classification"))
    model = loaded.pipelines["text-classification"].model
    reason = loaded.backend["dtype_reason"]
    if loaded.backend["active_dtype"] == "bfloat16":
        assert model.dtype == torch.bfloat16 and "labels same" in reason
    else:
        assert model.dtype == torch.float32 and "labels differ" in reason


def test_tasks_without_a_probe_keep_float32(tmp_path: Path) -> None:
    source = model_factory.build_masked_lm(tmp_path / "mlm")
    loaded = PipelineRunner(half_dtypes=("bfloat16",)).load(_spec(source, task="fill-mask"))
    assert loaded.pipelines["fill-mask"].model.dtype == torch.float32
    assert loaded.backend["active_dtype"] == "float32"
    assert "no half-precision probe for fill-mask" in loaded.backend["dtype_reason"]
