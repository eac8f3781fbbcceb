"""Sparse (SPLADE) models on paper: what their files say (core.model_layout) and what their answers keep and weigh
(catalog.sparse_answer)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from models_registry.catalog import answer_size, sparse_answer
from models_registry.catalog.specs import TaskSpec
from models_registry.core.batch_types import BatchPolicy
from models_registry.core.errors import TooLarge
from models_registry.core.model_layout import ModelLayout, UnsupportedLayout, parse_layout

LEGACY_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.sparse_encoder.models.MLMTransformer"},
    {"idx": 1, "name": "1", "path": "1_SpladePooling",
     "type": "sentence_transformers.sparse_encoder.models.SpladePooling"},
]
CURRENT_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"},
    {"idx": 1, "name": "1", "path": "1_SpladePooling",
     "type": "sentence_transformers.sparse_encoder.modules.splade_pooling.SpladePooling"},
]


def reader(modules: list[dict[str, Any]], files: dict[str, Any] | None = None) -> Any:
    """A FileReader over modules.json and files (path -> JSON value), as the directory's texts."""
    texts = {"modules.json": json.dumps(modules), **{k: json.dumps(v) for k, v in (files or {}).items()}}
    return texts.get


def test_the_legacy_layout_is_a_sparse_encoder() -> None:
    layout = parse_layout(reader(LEGACY_MODULES, {
        "1_SpladePooling/config.json": {"pooling_strategy": "max", "activation_function": "relu",
                                        "word_embedding_dimension": 30522},
        "sentence_bert_config.json": {"max_seq_length": 512, "do_lower_case": False},
        "config_sentence_transformers.json": {"model_type": "SparseEncoder", "similarity_fn_name": "dot"}}))
    assert layout.kind == "SparseEncoder" and layout.transformer_task == "fill-mask"
    assert layout.splade == {"pooling_strategy": "max", "activation_function": "relu"}
    assert layout.max_seq_length == 512 and layout.max_active_dims is None
    assert sparse_answer.is_sparse(layout)
    assert layout.said()["sparse"] == {"pooling_strategy": "max", "activation_function": "relu"}


def test_the_current_layout_and_its_bound_on_entries() -> None:
    layout = parse_layout(reader(CURRENT_MODULES, {
        "1_SpladePooling/config.json": {"pooling_strategy": "sum", "activation_function": "log1p_relu"},
        "sentence_bert_config.json": {"transformer_task": "fill-mask"},
        "config_sentence_transformers.json": {"model_type": "SparseEncoder", "max_active_dims": 64}}))
    assert layout.splade == {"pooling_strategy": "sum", "activation_function": "log1p_relu"}
    assert layout.max_active_dims == 64 and layout.said()["max_active_dims"] == 64
    assert ModelLayout.from_json(layout.to_json()) == layout  # as the registration stores it


@pytest.mark.parametrize(("modules", "files", "says"), [
    (CURRENT_MODULES, {"sentence_bert_config.json": {}}, "fill-mask"),  # SpladePooling over hidden states
    (LEGACY_MODULES + [{"idx": 2, "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}], {},
     "MLMTransformer -> SpladePooling -> Normalize"),
    (LEGACY_MODULES, {"config_sentence_transformers.json": {"max_active_dims": 0}}, "positive integer"),
    (LEGACY_MODULES, {"config_sentence_transformers.json": {"max_active_dims": "64"}}, "positive integer"),
    (LEGACY_MODULES, {"1_SpladePooling/config.json": {"pooling_strategy": "mean"}}, "SpladePooling mean"),
])
def test_what_is_not_computed_is_refused_with_why(modules: list[dict[str, Any]], files: dict[str, Any],
                                                  says: str) -> None:
    with pytest.raises(UnsupportedLayout, match=says):
        parse_layout(reader(modules, files))


def test_a_dense_layout_is_not_sparse() -> None:
    dense = parse_layout(reader([{"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"}]))
    assert not sparse_answer.is_sparse(dense) and dense.max_active_dims is None


def task(layout: ModelLayout, kind: str = "feature-extraction") -> TaskSpec:
    return TaskSpec(name="t", task=kind, parameters={}, pooling="mean", normalize=False, policy=BatchPolicy(),
                    timeout_s=1.0, layout=layout)


def test_which_tasks_are_sparse() -> None:
    sparse = ModelLayout(kind="SparseEncoder", splade={"pooling_strategy": "max", "activation_function": "relu"})
    assert sparse_answer.is_sparse_task(task(sparse))
    assert not sparse_answer.is_sparse_task(task(sparse, "fill-mask"))
    assert not sparse_answer.is_sparse_task(task(ModelLayout()))


def test_entries_kept_the_request_then_the_files_then_the_default_never_past_the_vocabulary() -> None:
    files = ModelLayout(max_active_dims=64)
    assert sparse_answer.active_dims({}, ModelLayout()) == sparse_answer.DEFAULT_MAX_ACTIVE_DIMS
    assert sparse_answer.active_dims({}, files) == 64
    assert sparse_answer.active_dims({"max_active_dims": 5000}, files) == 5000
    assert sparse_answer.active_dims({"max_active_dims": 5000}, files, width=1000) == 1000
    assert sparse_answer.active_dims({"max_active_dims": None}, files, width=30522) == 64


def test_the_answer_is_bounded_and_charged_by_what_it_may_weigh() -> None:
    weight = sparse_answer.answer_bytes(256, sparse_answer.DEFAULT_MAX_ACTIVE_DIMS)
    answer_size.check_answer_bytes(weight, 16 * 1024 * 1024)  # the most inputs at the default bound: allowed
    assert answer_size.answer_tokens(weight) == 256 * 36  # 36 tokens per input at most
    with pytest.raises(TooLarge, match="HOSTING_MAX_ANSWER_BYTES"):  # a whole vocabulary per input is not
        answer_size.check_answer_bytes(sparse_answer.answer_bytes(256, 30522), 16 * 1024 * 1024)


def test_a_vector_travels_as_two_byte_arrays() -> None:
    vector = sparse_answer.SparseVector(b"\x01\x00\x00\x00", b"\x00\x00\x80\x3f")
    wire = vector.to_wire()
    assert set(wire) == {"indices", "values"} and sparse_answer.is_sparse_output(wire)
    assert sparse_answer.SparseVector.from_wire(wire) == vector
    assert not sparse_answer.is_sparse_output([b"\x00" * 4, [1]])  # a dense vector's [bytes, shape]


def test_the_worker_estimates_a_sparse_answer_at_its_bound_before_compute() -> None:
    from types import SimpleNamespace

    from models_registry.worker import intake

    slot: Any = SimpleNamespace(loaded=SimpleNamespace(sparse_width=30522, layout=ModelLayout(max_active_dims=64)))
    assert intake.answer_bytes("feature-extraction", ["a", "b"], {}, slot) == 2 * 64 * 36
    assert intake.answer_bytes("feature-extraction", ["a"], {"max_active_dims": 10**6}, slot) == 30522 * 36
    dense: Any = SimpleNamespace(loaded=SimpleNamespace(sparse_width=None, layout=ModelLayout()))
    assert intake.answer_bytes("feature-extraction", ["a"], {}, dense) == 0


def test_a_new_version_from_dense_to_sparse_changes_the_output_shape(tmp_path: Any) -> None:
    from models_registry.catalog import output_shape

    config = {"hidden_size": 32, "vocab_size": 100}
    dense, sparse = tmp_path / "dense", tmp_path / "sparse"
    for directory in (dense, sparse):
        directory.mkdir()
        (directory / "config.json").write_text(json.dumps(config))
    for path, value in {"modules.json": LEGACY_MODULES, "1_SpladePooling/config.json": {"pooling_strategy": "max"},
                        "config_sentence_transformers.json": {"model_type": "SparseEncoder"}}.items():
        (sparse / path).parent.mkdir(exist_ok=True)
        (sparse / path).write_text(json.dumps(value))
    problem = output_shape.change((str(dense), ""), (str(sparse), ""), ["feature-extraction"], 1, 2)
    assert problem is not None and "sparse vectors over 100 words" in problem and "32-float vectors" in problem
    assert output_shape.change((str(sparse), ""), (str(sparse), ""), ["feature-extraction"], 1, 2) is None
