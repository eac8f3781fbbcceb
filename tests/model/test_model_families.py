"""Every embedding family, laid out as its hub repository and registered with no flags, gives sentence-transformers' vectors.

The reference is sentence-transformers' own SentenceTransformer on the same directory: cosine >= 0.9999 and
norms within 0.5%, for every prompt the model defines, packed and padded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from models_registry.catalog.specs import ModelSpec, TaskSpec
from models_registry.core.batch_types import BatchPolicy
from tests import hub_layouts

torch = pytest.importorskip("torch")
sentence_transformers = pytest.importorskip("sentence_transformers")
from models_registry.inference.model_runner import PipelineRunner  # noqa: E402

TEXTS = [
    "Hello World, this is ONE sentence.",
    "short",
    "Paris is the capital of France",
    "a much longer sentence that goes on " * 12,  # over bge's max_seq_length of 64 tokens: truncated alike
]


def unflagged_task() -> TaskSpec:
    """A feature-extraction task as `register_model --task feature-extraction` with no flags leaves it."""
    return TaskSpec(name="fe", task="feature-extraction", parameters={}, pooling="mean", normalize=False,
                    policy=BatchPolicy(max_batch_size=64), timeout_s=30.0)


def spec_for(source: Path) -> ModelSpec:
    return ModelSpec(name="m", source=str(source), revision="", device="cpu", dtype="float32", enabled=True,
                     tasks={"fe": unflagged_task()}, default_task="fe")


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    return {name: hub_layouts.build(family, root / name) for name, family in hub_layouts.FAMILIES.items()}


def assert_same_vectors(ours: list[np.ndarray], reference: np.ndarray) -> None:
    assert [v.shape for v in ours] == [r.shape for r in reference]
    for got, want in zip(ours, reference):
        cosine = float(np.dot(got, want) / (np.linalg.norm(got) * np.linalg.norm(want)))
        assert cosine >= 0.9999
        assert np.linalg.norm(got) == pytest.approx(np.linalg.norm(want), rel=0.005)


@pytest.mark.parametrize("packing", [True, False], ids=["packed", "padded"])
@pytest.mark.parametrize("family", sorted(hub_layouts.FAMILIES))
def test_family_vectors_equal_sentence_transformers(family: str, packing: bool, family_dirs: dict[str, Path]) -> None:
    source = family_dirs[family]
    runner = PipelineRunner(packing=packing, torchscript=False)
    loaded = runner.load(spec_for(source))
    reference = sentence_transformers.SentenceTransformer(str(source), device="cpu")
    task = unflagged_task()
    for prompt_name in [None, *hub_layouts.FAMILIES[family].prompts]:
        params = [{"prompt_name": prompt_name} if prompt_name else {}] * len(TEXTS)
        ours = [np.frombuffer(raw, dtype="<f4").reshape(shape) for raw, shape in runner.run(loaded, task, TEXTS, params)]
        assert_same_vectors(ours, reference.encode(TEXTS, prompt_name=prompt_name))


def test_the_operator_overrides_what_the_files_say(family_dirs: dict[str, Path]) -> None:
    """pooling and normalize set at registration win over 1_Pooling and Normalize."""
    from dataclasses import replace

    runner = PipelineRunner(packing=True, torchscript=False)
    loaded = runner.load(spec_for(family_dirs["bge"]))
    task = replace(unflagged_task(), pooling_override="mean", normalize_override=False)
    got = [np.frombuffer(raw, dtype="<f4") for raw, _ in runner.run(loaded, task, TEXTS[:2], [{}, {}])]
    assert not np.isclose(np.linalg.norm(got[0]), 1.0, atol=1e-3)  # bge's files say Normalize
    model = sentence_transformers.SentenceTransformer(str(family_dirs["bge"]), device="cpu")
    tokens = model.encode(TEXTS[:2], output_value="token_embeddings")
    assert np.allclose(got[0], tokens[0].numpy().mean(axis=0), atol=1e-5)  # mean, where the files say CLS


def test_a_module_the_server_does_not_compute_fails_the_load(tmp_path: Path) -> None:
    source = hub_layouts.build_unsupported(tmp_path / "lstm")
    with pytest.raises(ValueError, match="LSTM"):
        PipelineRunner(packing=True).load(spec_for(source))
