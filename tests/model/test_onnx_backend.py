"""The ONNX Runtime backend: exported once into the cache, equal to torch's vectors, int8 refused under its floor."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from models_registry.core.batch_types import BatchPolicy
from models_registry.catalog.specs import ModelSpec, TaskSpec
from tests import model_factory

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
from models_registry.inference import onnx_backend, onnx_export
from models_registry.inference.model_runner import PipelineRunner
from models_registry.inference.onnx_backend import OrtEncoder, OrtSettings

WORDS = ["the", "model", "server", "exports", "its", "encoder", "once", "and", "every", "worker", "reads", "the", "file"]


def _spec(source: Path, backend: str = "onnxruntime", dtype: str = "float32", pooling: str = "mean") -> ModelSpec:
    task = TaskSpec(name="embed", task="feature-extraction", parameters={}, pooling=pooling, normalize=True,
                    policy=BatchPolicy(max_batch_size=64), timeout_s=30.0)
    return ModelSpec(name="m", source=str(source), revision="", device="cpu", dtype=dtype, enabled=True,
                     tasks={"embed": task}, default_task="embed", backend=backend)


def _sentences() -> list[str]:
    rng = random.Random(5)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40))) for _ in range(30)]
    texts.append(" ".join(WORDS * 50))  # truncated at the model's length
    return texts


def _arrays(outputs: list) -> list[np.ndarray]:
    return [np.frombuffer(raw, dtype="<f4").reshape(shape) for raw, shape in outputs]


@pytest.fixture(scope="module")
def minilm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")  # one MiniLM export for the whole module


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return model_factory.build_masked_lm(tmp_path_factory.mktemp("tiny-bert"))


@pytest.mark.parametrize("pooling", ["mean", "cls", "none"])
def test_onnx_vectors_equal_torch_on_minilm(minilm_cache: Path, pooling: str) -> None:
    spec = _spec(model_factory.minilm_path(), pooling=pooling)
    ort = PipelineRunner(ort=OrtSettings(minilm_cache)).load(spec)
    eager = PipelineRunner(torchscript=False).load(replace(spec, backend="torch"))
    assert isinstance(ort.packed_encoder, OrtEncoder) and ort.backend == {"backend": "onnxruntime"}
    assert not isinstance(eager.packed_encoder, OrtEncoder)
    texts, task = _sentences(), spec.tasks["embed"]
    got = _arrays(PipelineRunner().run(ort, task, texts, [{}] * len(texts)))
    want = _arrays(PipelineRunner().run(eager, task, texts, [{}] * len(texts)))
    for a, b in zip(got, want):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, atol=2e-5)


def test_export_is_cached_and_reused(tmp_path: Path, tiny_bert: Path) -> None:
    runner = PipelineRunner(ort=OrtSettings(tmp_path))
    first = runner.load(_spec(tiny_bert))
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    exported = folder / "model.onnx"
    stamp = exported.stat().st_mtime_ns
    second = runner.load(_spec(tiny_bert))
    assert exported.stat().st_mtime_ns == stamp  # read back, not exported again
    assert not list(folder.glob("*.tmp"))
    texts, task = _sentences()[:8], _spec(tiny_bert).tasks["embed"]
    np.testing.assert_allclose(np.array(_arrays(runner.run(first, task, texts, [{}] * 8))),
                               np.array(_arrays(runner.run(second, task, texts, [{}] * 8))), atol=1e-6)


def test_cache_key_follows_the_model_files(tmp_path: Path, tiny_bert: Path) -> None:
    from transformers import AutoConfig

    class _Model:
        config = AutoConfig.from_pretrained(str(tiny_bert))

    before = onnx_export.cache_key(str(tiny_bert), "", _Model())
    assert before == onnx_export.cache_key(str(tiny_bert), "", _Model())
    assert before != onnx_export.cache_key(str(tiny_bert), "v2", _Model())
    copy = tmp_path / "copy"
    copy.mkdir()
    for file in tiny_bert.iterdir():
        (copy / file.name).write_bytes(file.read_bytes())
    (copy / "config.json").write_text((tiny_bert / "config.json").read_text() + "\n")
    assert onnx_export.cache_key(str(copy), "", _Model()) != before


def test_a_broken_export_falls_back_to_torch_with_the_reason(tmp_path: Path, tiny_bert: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    def differs(*args: object) -> None:
        raise ValueError("ONNX outputs differ from torch's by 0.5 (relative)")

    monkeypatch.setattr(onnx_backend, "check_encoder", differs)
    loaded = PipelineRunner(ort=OrtSettings(tmp_path)).load(_spec(tiny_bert, backend="auto"))
    assert not isinstance(loaded.packed_encoder, OrtEncoder)
    assert loaded.backend == {"backend": "torch", "backend_reason": "ValueError: ONNX outputs differ from torch's by 0.5 (relative)"}


def test_backend_torch_and_no_packing_keep_torch(tmp_path: Path, tiny_bert: Path) -> None:
    loaded = PipelineRunner(ort=OrtSettings(tmp_path)).load(_spec(tiny_bert, backend="torch"))
    assert loaded.backend["backend"] == "torch" and not list(tmp_path.iterdir())
    with pytest.raises(ValueError, match="int8 serves packed embeddings only"):
        PipelineRunner(packing=False, ort=OrtSettings(tmp_path)).load(_spec(tiny_bert, dtype="int8"))


def test_int8_reports_its_cosines(tmp_path: Path, tiny_bert: Path) -> None:
    loaded = PipelineRunner(ort=OrtSettings(tmp_path, int8_min_cosine=0.5)).load(_spec(tiny_bert, dtype="int8"))
    cosine = loaded.backend["int8_cosine"]
    assert loaded.backend["backend"] == "onnxruntime" and 0.5 <= cosine["min"] <= cosine["median"] <= 1.0
    assert loaded.backend["backend_reason"] == "int8: every matrix product"
    assert (next(p for p in tmp_path.iterdir() if p.is_dir()) / "model-int8.onnx").is_file()
    texts = _sentences()[:6]
    vectors = _arrays(PipelineRunner().run(loaded, loaded.spec.tasks["embed"], texts, [{}] * 6))
    assert all(v.shape == (32,) and abs(float(np.linalg.norm(v)) - 1) < 1e-4 for v in vectors)


def test_int8_is_refused_under_the_floor(minilm_cache: Path) -> None:
    runner = PipelineRunner(ort=OrtSettings(minilm_cache, int8_min_cosine=0.9999))
    with pytest.raises(onnx_backend.Int8Refused, match="under the floor of 0.9999") as refused:
        runner.load(_spec(model_factory.minilm_path(), dtype="int8"))
    # Both copies were tried: every product in int8, then the cautious one.
    assert "every matrix product: minimum 0.9" in str(refused.value) and "first layer in float: minimum" in str(refused.value)


@pytest.mark.parametrize(("task", "build", "inputs", "params"), [
    ("text-classification", model_factory.build_sequence_classifier, ["I loved it.", "Terrible, slow and loud."], {}),
    ("token-classification", model_factory.build_token_classifier, ["Anna flew to Paris on Monday."], {}),
    ("fill-mask", model_factory.build_masked_lm, ["Paris is the [MASK] of France.", "A [MASK] day."], {"top_k": 3}),
    ("text-ranking", model_factory.build_cross_encoder,
     [{"query": "where is Paris", "text": "Paris is in France."}, {"query": "cats", "text": "Dogs bark."}], {}),
])
def test_logits_tasks_on_onnxruntime_answer_as_torch(tmp_path: Path, task: str, build: Any, inputs: list[Any],
                                                     params: dict[str, Any]) -> None:
    source = build(tmp_path / "model")
    spec = replace(_spec(source, backend="auto"), tasks={"t": TaskSpec(
        name="t", task=task, parameters={}, pooling="mean", normalize=False, policy=BatchPolicy(max_batch_size=8),
        timeout_s=30.0)}, default_task="t")
    ort = PipelineRunner(ort=OrtSettings(tmp_path / "cache")).load(spec)
    torch_only = PipelineRunner().load(replace(spec, backend="torch"))
    assert ort.backend == {"backend": "onnxruntime", "task_backends": {task: "onnxruntime"}}
    assert torch_only.backend["backend"] == "torch"
    got = PipelineRunner().run(ort, spec.tasks["t"], inputs, [params] * len(inputs))
    want = PipelineRunner().run(torch_only, spec.tasks["t"], inputs, [params] * len(inputs))
    _assert_close(got, want)


def _assert_close(got: Any, want: Any) -> None:
    """Equal answers, scores within 1e-4: ONNX Runtime and torch agree to about 1e-6, not to the last bit."""
    if isinstance(want, float):
        assert got == pytest.approx(want, abs=1e-4)
    elif isinstance(want, dict):
        assert got.keys() == want.keys()
        for key in want:
            _assert_close(got[key], want[key])
    elif isinstance(want, list):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            _assert_close(a, b)
    else:
        assert got == want
