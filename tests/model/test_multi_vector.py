"""ColBERT-style models, laid out as their hub repositories and registered with no flags, give sentence-transformers'
own MultiVectorEncoder token vectors and MaxSim scores.

The reference is MultiVectorEncoder on the same directory: encode_query for prompt_name "query", encode_document
otherwise; the same token count per input, cosine >= 0.9999 per token, norms within 0.5%, scores within 1e-3.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from models_registry.catalog.specs import ModelSpec, TaskSpec
from models_registry.core.batch_types import BatchPolicy
from tests import colbert_layouts, model_factory

torch = pytest.importorskip("torch")
sentence_transformers = pytest.importorskip("sentence_transformers")
from models_registry.inference.model_runner import PipelineRunner  # noqa: E402

TEXTS = [
    "Hello, World! this is ONE sentence.",
    "short",
    "Paris is the capital of France.",
    "a much longer sentence, with commas; that goes on " * 10,  # over every layout's lengths: truncated alike
    "[q] a lower-case prefix in the text",
]


def unflagged_task() -> TaskSpec:
    """A feature-extraction task as `register_model --task feature-extraction` with no flags leaves it."""
    return TaskSpec(name="fe", task="feature-extraction", parameters={}, pooling="mean", normalize=False,
                    policy=BatchPolicy(max_batch_size=64), timeout_s=30.0)


def spec_for(source: Path, task: TaskSpec | None = None) -> ModelSpec:
    return ModelSpec(name="m", source=str(source), revision="", device="cpu", dtype="float32", enabled=True,
                     tasks={"fe": task or unflagged_task()}, default_task="fe")


@pytest.fixture(scope="module")
def layout_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("colbert")
    return {name: colbert_layouts.build(layout, root / name) for name, layout in colbert_layouts.LAYOUTS.items()}


def as_arrays(outputs: list) -> list[np.ndarray]:
    return [np.frombuffer(raw, dtype="<f4").reshape(shape) for raw, shape in outputs]


def assert_same_token_vectors(ours: list[np.ndarray], reference: list) -> None:
    assert [v.shape for v in ours] == [tuple(r.shape) for r in reference]
    for got, want in zip(ours, reference):
        want = np.asarray(want)
        cosine = (got * want).sum(axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
        assert cosine.min() >= 0.9999
        assert np.allclose(np.linalg.norm(got, axis=1), np.linalg.norm(want, axis=1), rtol=0.005)


@pytest.mark.parametrize("packing", [True, False], ids=["packing-on", "packing-off"])
@pytest.mark.parametrize("name", sorted(colbert_layouts.LAYOUTS))
def test_token_vectors_and_maxsim_equal_the_multi_vector_encoder(name: str, packing: bool,
                                                                 layout_dirs: dict[str, Path]) -> None:
    source = layout_dirs[name]
    runner = PipelineRunner(packing=packing, torchscript=False)
    loaded = runner.load(spec_for(source))
    reference = sentence_transformers.MultiVectorEncoder(str(source), device="cpu")
    task = unflagged_task()
    for params, encoded in (({"prompt_name": "query"}, reference.encode_query(TEXTS)),
                            ({"prompt_name": "document"}, reference.encode_document(TEXTS)),
                            ({}, reference.encode_document(TEXTS))):  # no prompt_name: the document side
        assert_same_token_vectors(as_arrays(runner.run(loaded, task, TEXTS, [params] * len(TEXTS))), encoded)
    queries = [TEXTS[0], TEXTS[2]]
    pairs = [{"query": query, "text": text} for query in queries for text in TEXTS]
    scores = runner.run(loaded, task, pairs, [{"raw_scores": False}] * len(pairs))
    want = reference.similarity(reference.encode_query(queries), reference.encode_document(TEXTS))
    assert np.allclose(scores, want.flatten().numpy(), atol=1e-3)


def test_the_operator_can_turn_normalize_off(layout_dirs: dict[str, Path]) -> None:
    task = replace(unflagged_task(), normalize_override=False)
    runner = PipelineRunner(packing=False, torchscript=False)
    loaded = runner.load(spec_for(layout_dirs["mve"], task))
    [vectors] = as_arrays(runner.run(loaded, task, TEXTS[:1], [{}]))
    assert not np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
    [again] = as_arrays(runner.run(loaded, task, TEXTS[:1], [{"normalize": True}]))  # the request's word wins
    assert np.allclose(np.linalg.norm(again, axis=1), 1.0, atol=1e-5)


def test_a_query_over_its_length_with_truncate_false_is_refused(layout_dirs: dict[str, Path]) -> None:
    runner = PipelineRunner(packing=False, torchscript=False)
    loaded = runner.load(spec_for(layout_dirs["mve"]))
    [failure] = runner.run(loaded, unflagged_task(), [TEXTS[3]], [{"prompt_name": "query", "truncate": False}])
    assert "over this model's 16 for a query" in failure.error.message


def test_an_undefined_prompt_name_is_refused(layout_dirs: dict[str, Path]) -> None:
    runner = PipelineRunner(packing=False, torchscript=False)
    loaded = runner.load(spec_for(layout_dirs["pylate"]))
    [failure] = runner.run(loaded, unflagged_task(), ["x"], [{"prompt_name": "nope"}])
    assert "prompt_name 'nope' is not defined" in failure.error.message


def test_a_pooling_set_by_the_operator_fails_the_load(layout_dirs: dict[str, Path]) -> None:
    task = replace(unflagged_task(), pooling_override="mean")
    with pytest.raises(ValueError, match="multi-vector"):
        PipelineRunner(packing=False).load(spec_for(layout_dirs["mve"], task))


def test_a_stanford_colbert_checkpoint_fails_the_load_instead_of_serving_bert(tmp_path: Path) -> None:
    import json

    source = model_factory.build_feature_extractor(tmp_path / "stanford")
    config = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**config, "architectures": ["HF_ColBERT"]}))
    with pytest.raises(ValueError, match="HF_ColBERT"):
        PipelineRunner(packing=False).load(spec_for(source))
