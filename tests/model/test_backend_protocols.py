"""inference.backend: torch eager, its trace and ONNX Runtime are each a PackedEncoder; the runner is a ModelRunner."""

from __future__ import annotations

from pathlib import Path

import pytest

from models_registry.core.batch_types import BatchPolicy
from models_registry.catalog.specs import ModelSpec, TaskSpec
from tests import model_factory

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
from models_registry.inference import packing
from models_registry.inference.backend import ModelRunner, PackedEncoder
from models_registry.inference.model_runner import PipelineRunner
from models_registry.inference.onnx_backend import OrtEncoder, OrtSettings
from models_registry.inference.packed_forward import EagerEncoder, packed_inputs
from models_registry.inference.trace import TracedEncoder

TEXTS = ["a short one", "the server packs several inputs in one row of tokens", "ok"]


def _spec(source: Path, backend: str) -> ModelSpec:
    task = TaskSpec(name="embed", task="feature-extraction", parameters={}, pooling="mean", normalize=True,
                    policy=BatchPolicy(max_batch_size=8), timeout_s=30.0)
    return ModelSpec(name="m", source=str(source), revision="", device="cpu", dtype="float32", enabled=True,
                     tasks={"embed": task}, default_task="embed", backend=backend)


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return model_factory.build_feature_extractor(tmp_path_factory.mktemp("tiny-bert"))


def test_every_packed_backend_is_a_packed_encoder_with_the_same_outputs(tiny_bert: Path, tmp_path: Path) -> None:
    runners = {EagerEncoder: PipelineRunner(torchscript=False), TracedEncoder: PipelineRunner(torchscript=True),
               OrtEncoder: PipelineRunner(ort=OrtSettings(tmp_path))}
    hidden = []
    for kind, runner in runners.items():
        assert isinstance(runner, ModelRunner)
        loaded = runner.load(_spec(tiny_bert, "onnxruntime" if kind is OrtEncoder else "torch"))
        encoder = loaded.packed_encoder
        assert type(encoder) is kind and isinstance(encoder, PackedEncoder)
        pipe = loaded.pipelines["feature-extraction"]
        encoded = pipe.tokenizer(TEXTS)
        (forward,) = packing.plan_packing([len(x) for x in encoded["input_ids"]], row_tokens=encoder.row_tokens)
        inputs, _owner = packed_inputs(forward, encoded["input_ids"], encoded["token_type_ids"],
                                       loaded.pack_position_offset or 0, pipe.tokenizer.pad_token_id or 0, "cpu",
                                       torch.float32)
        with torch.inference_mode():
            hidden.append(encoder(inputs))
    for other in hidden[1:]:
        torch.testing.assert_close(other, hidden[0], atol=2e-5, rtol=1e-4)


def test_the_protocols_refuse_what_lacks_their_members() -> None:
    """The checks can fail: a bare callable has no row width, an object without run is no runner."""

    class LoadsOnly:
        default_device = "cpu"

        def load(self, spec: ModelSpec) -> None:
            return None

    assert not isinstance(lambda inputs: inputs, PackedEncoder)
    assert not isinstance(LoadsOnly(), ModelRunner)
