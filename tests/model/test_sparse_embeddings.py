"""SPLADE models through the runner: the same non-zero entries, and values, as sentence-transformers' SparseEncoder.

Each directory is written as the hub has it (tests.sparse_layouts): both module layouts, max and sum
pooling, the log1p_relu activation, prompts, a max_seq_length below the model's, and the bound on
entries per vector (the files' max_active_dims, the request's, the default for a nearly dense head).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from models_registry.core.batch_types import BatchPolicy, ItemFailure
from models_registry.core.errors import InvalidInput
from models_registry.catalog import sparse_answer
from models_registry.catalog.specs import ModelSpec, TaskSpec
from tests import sparse_layouts

torch = pytest.importorskip("torch")
sentence_transformers = pytest.importorskip("sentence_transformers")
from models_registry.inference.model_runner import PipelineRunner

WORDS = ["river", "model", "server", "batch", "queue", "token", "vector", "worker", "request", "answer", "Paris"]


def texts(count: int, seed: int = 3, longest: int = 60) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, longest))) for _ in range(count)]


TASK = TaskSpec(name="fe", task="feature-extraction", parameters={}, pooling="mean", normalize=False,
                policy=BatchPolicy(max_batch_size=64), timeout_s=30.0)


def load(directory: Path, dtype: str = "float32") -> tuple[PipelineRunner, Any]:
    """The runner and the model loaded as a task registered with no flags on directory (dtype auto tries bfloat16)."""
    spec = ModelSpec(name="splade", source=str(directory), revision="", device="cpu", dtype=dtype, enabled=True,
                     tasks={"fe": TASK}, default_task="fe")
    runner = PipelineRunner(packing=True, half_dtypes=("bfloat16",))
    return runner, runner.load(spec)


def run(directory: Path, inputs: list[str], params: dict[str, Any] | None = None, dtype: str = "float32") -> list[Any]:
    """The runner's answers for inputs."""
    runner, loaded = load(directory, dtype)
    return runner.run(loaded, TASK, inputs, [dict(params or {})] * len(inputs))


def dense(output: Any, width: int) -> np.ndarray:
    """A worker's sparse answer as the dense vector it stands for."""
    assert sparse_answer.is_sparse_output(output), output
    vector = sparse_answer.SparseVector.from_wire(output)
    indices = np.frombuffer(vector.indices, dtype="<u4")
    values = np.frombuffer(vector.values, dtype="<f4")
    assert list(indices) == sorted(set(indices.tolist()))  # ascending, once each
    assert (values > 0).all()
    out = np.zeros(width, dtype=np.float32)
    out[indices] = values
    return out


def reference(directory: Path, inputs: list[str], **encode: Any) -> np.ndarray:
    model = sentence_transformers.SparseEncoder(str(directory), device="cpu")
    return model.encode(inputs, convert_to_sparse_tensor=False, **encode).cpu().numpy()


def assert_same(ours: list[Any], theirs: np.ndarray) -> None:
    """The same non-zero indices for every input, and values within 1e-3 (relative)."""
    for output, expected in zip(ours, theirs, strict=True):
        got = dense(output, expected.shape[0])
        assert np.array_equal(np.nonzero(got)[0], np.nonzero(expected)[0])
        assert np.allclose(got, expected, rtol=1e-3, atol=1e-6)  # atol: float32 rounding of entries near zero


@pytest.mark.parametrize(("layout", "pooling", "activation"), [
    (sparse_layouts.LEGACY, "max", "relu"),
    (sparse_layouts.CURRENT, "max", "relu"),
    (sparse_layouts.CURRENT, "sum", "relu"),
    (sparse_layouts.LEGACY, "max", "log1p_relu"),
    (sparse_layouts.CURRENT, "sum", "log1p_relu"),
])
def test_vectors_are_the_sparse_encoders_own(tmp_path: Path, layout: str, pooling: str, activation: str) -> None:
    directory = sparse_layouts.build_splade(tmp_path / "splade", layout=layout, pooling=pooling, activation=activation)
    inputs = texts(40)
    ours = run(directory, inputs)
    theirs = reference(directory, inputs)
    assert_same(ours, theirs)
    counts = [int((row > 0).sum()) for row in theirs]
    assert 10 < min(counts) and max(counts) < sparse_answer.DEFAULT_MAX_ACTIVE_DIMS  # whole vectors came back


@pytest.mark.parametrize("layout", [sparse_layouts.LEGACY, sparse_layouts.CURRENT])
def test_prompts_and_max_seq_length_apply_as_the_sparse_encoder_applies_them(tmp_path: Path, layout: str) -> None:
    directory = sparse_layouts.build_splade(tmp_path / "splade", layout=layout,
                                            prompts={"query": "query: "}, default_prompt_name="query",
                                            max_seq_length=16)
    inputs = texts(12, seed=5)  # most are longer than 16 tokens: truncated as the model's files say
    assert_same(run(directory, inputs), reference(directory, inputs))  # the default prompt
    assert_same(run(directory, inputs, {"prompt_name": "document"}), reference(directory, inputs,
                                                                               prompt_name="document"))
    [failure] = run(directory, inputs[:1], {"prompt_name": "passage"})
    assert isinstance(failure, ItemFailure) and isinstance(failure.error, InvalidInput)


def test_the_files_max_active_dims_and_the_requests_bound_each_vector(tmp_path: Path) -> None:
    directory = sparse_layouts.build_splade(tmp_path / "splade", max_active_dims=8)
    inputs = texts(6, seed=7)
    ours = run(directory, inputs)
    assert_same(ours, reference(directory, inputs))  # the SparseEncoder reads max_active_dims from the files too
    assert {len(sparse_answer.SparseVector.from_wire(o).indices) // 4 for o in ours} == {8}
    asked = run(directory, inputs, {"max_active_dims": 3})
    assert_same(asked, reference(directory, inputs, max_active_dims=3))


def test_a_nearly_dense_head_answers_its_default_number_of_largest_entries(tmp_path: Path) -> None:
    directory = sparse_layouts.build_splade(tmp_path / "splade", shift=0.0)  # a random head: most words positive
    inputs = texts(3, seed=9, longest=10)
    ours = run(directory, inputs)
    full = reference(directory, inputs)
    assert min(int((row > 0).sum()) for row in full) > 10 * sparse_answer.DEFAULT_MAX_ACTIVE_DIMS
    assert_same(ours, reference(directory, inputs, max_active_dims=sparse_answer.DEFAULT_MAX_ACTIVE_DIMS))


def test_dtype_auto_keeps_a_sparse_model_in_its_checkpoints_dtype(tmp_path: Path) -> None:
    directory = sparse_layouts.build_splade(tmp_path / "splade")
    _, loaded = load(directory, dtype="auto")  # a dense model would be probed in bfloat16 here
    assert loaded.backend["active_dtype"] == "float32" and "sparse" in loaded.backend["dtype_reason"]
    assert loaded.pipelines["feature-extraction"].model.dtype == torch.float32
    inputs = texts(4)
    assert_same(run(directory, inputs, dtype="auto"), reference(directory, inputs))


def test_long_inputs_run_in_forwards_within_the_logits_budget() -> None:
    from models_registry.inference.sparse_embeddings import LOGITS_BUDGET, MAX_ROWS, rows_per_forward

    assert rows_per_forward(512, 30_522) == LOGITS_BUDGET // (512 * 30_522) == 2
    assert rows_per_forward(8, 30_522) == MAX_ROWS
    assert rows_per_forward(100_000, 250_002) == 1  # one input over budget still runs alone


def test_onnxruntime_asked_for_a_sparse_model_is_a_load_error_that_says_why(tmp_path: Path) -> None:
    directory = sparse_layouts.build_splade(tmp_path / "splade")
    spec = ModelSpec(name="splade", source=str(directory), revision="", device="cpu", dtype="float32", enabled=True,
                     tasks={"fe": TASK}, default_task="fe", backend="onnxruntime")
    with pytest.raises(ValueError, match="runs on torch"):
        PipelineRunner(packing=True).load(spec)
