"""With the memory cap on, ONNX Runtime's arena is off: a batch's measured peak is its own, whatever ran before it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import model_factory

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
from models_registry.inference import onnx_backend  # noqa: E402
from models_registry.inference.model_runner import PipelineRunner  # noqa: E402
from models_registry.inference.onnx_backend import OrtEncoder, OrtSettings  # noqa: E402
from models_registry.capacity.peak_memory import PeakProbe  # noqa: E402
from tests.model.test_onnx_backend import _spec  # noqa: E402


def _peak_after_a_larger_batch(encoder: OrtEncoder, tokenizer: object) -> tuple[int, int]:
    """(peak of a batch measured first, peak of the same batch measured after a four times larger one (16 x 512 tokens, still one forward))."""
    probe = PeakProbe("cpu")
    texts = [" ".join(f"w{i}x{j}y" for j in range(200)) for i in range(4)]  # 4 x 512 tokens (one forward)
    probe.start()
    onnx_backend.mean_vectors(encoder, tokenizer, texts, 0)
    first = probe.peak()
    onnx_backend.mean_vectors(encoder, tokenizer, texts * 4, 0)
    probe.start()
    onnx_backend.mean_vectors(encoder, tokenizer, texts, 0)
    return first, probe.peak()


@pytest.mark.skipif(not PeakProbe("cpu").works, reason="needs /proc peak resident set counters")
def test_without_the_arena_a_batch_peak_is_measured_after_a_larger_batch(tmp_path: Path) -> None:
    source = model_factory.minilm_path()
    loaded = PipelineRunner(ort=OrtSettings(tmp_path, arena=False)).load(_spec(source))
    encoder, tokenizer = loaded.packed_encoder, loaded.pipelines["feature-extraction"].tokenizer
    assert isinstance(encoder, OrtEncoder)
    assert encoder.session.get_session_options().enable_cpu_mem_arena is False
    first, again = _peak_after_a_larger_batch(encoder, tokenizer)
    assert first > 1_000_000 and again > 0.5 * first, (first, again)

