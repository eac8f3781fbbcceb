"""Sparse (SPLADE) answers: which tasks give them, what they take, how they travel, their entries and weight (pure).

A SPLADE vector has one entry per word of the vocabulary (30,522 for BERT's) and is mostly zeros: the
worker sends only its non-zero entries, as two little-endian arrays (uint32 indices, ascending, and
their float32 values), never the dense vector. A trained model keeps tens (a query) to a few hundred (a
passage) entries; an untrained or lightly regularised one is non-zero almost everywhere (a random BERT
head: 28,000 of 30,522). So each vector keeps at most max_active_dims entries, its largest, as
sentence-transformers' own `max_active_dims` does: the request's, else the task's default, else the
model's files' (config_sentence_transformers.json), else DEFAULT_MAX_ACTIVE_DIMS. The answer is then
bounded before compute: inputs x that bound x ENTRY_BYTES is refused over HOSTING_MAX_ANSWER_BYTES and
charged as tokens (catalog.answer_size), so max_request_tokens bounds it as it bounds what a model reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from models_registry.core.errors import InvalidInput
from models_registry.core.model_layout import ModelLayout
from models_registry.catalog.specs import TaskSpec

PARAMETER = "max_active_dims"  # sentence-transformers' name, a feature-extraction parameter of sparse tasks
# Above what trained SPLADE models answer for a 512-token passage, so their vectors come back whole;
# an untrained model's 28,000 entries would be a 1 MB answer per input.
DEFAULT_MAX_ACTIVE_DIMS = 1024
ENTRY_BYTES = 36  # one {"index": 12345, "value": 0.12345678} in the JSON answer
INDICES, VALUES = "indices", "values"  # the keys of one vector on the wire
DENSE_ONLY = ("dimensions", "truncate_dim")  # Matryoshka cuts: a vocabulary-wide vector has no such prefix


@dataclass(frozen=True)
class SparseVector:
    """One input's non-zero entries as the worker sends them: uint32 indices (ascending), float32 values (LE)."""

    indices: bytes
    values: bytes

    def to_wire(self) -> dict[str, bytes]:
        """The msgpack-safe form (str keys, bytes values)."""
        return {INDICES: self.indices, VALUES: self.values}

    @classmethod
    def from_wire(cls, output: dict[str, bytes]) -> SparseVector:
        """The vector to_wire wrote."""
        return cls(bytes(output[INDICES]), bytes(output[VALUES]))


def is_sparse_output(output: Any) -> bool:
    """Whether a feature-extraction output is a SparseVector's wire form (a dense one is [bytes, shape])."""
    return isinstance(output, dict) and INDICES in output and VALUES in output


def is_sparse(layout: ModelLayout) -> bool:
    """Whether a model's files make it a sparse encoder (an MLM transformer, then SpladePooling)."""
    return layout.splade is not None


def is_sparse_task(task: TaskSpec) -> bool:
    """Whether a task computes sparse vectors, as its registration read the model's files."""
    return task.task == "feature-extraction" and is_sparse(task.layout)


def check_parameters(task: TaskSpec, parameters: dict[str, Any]) -> None:
    """400 for what a task's vectors do not take: Matryoshka cuts or normalize (sparse), max_active_dims (dense)."""
    if is_sparse_task(task):
        asked = [key for key in DENSE_ONLY if parameters.get(key) is not None]
        asked += ["normalize"] if parameters.get("normalize") else []
        if asked:
            raise InvalidInput(f"{', '.join(asked)} do(es) not apply to a sparse (SPLADE) model's vectors (its "
                               f"vocabulary-wide weights, not normalized); {PARAMETER} bounds their entries")
    elif task.task == "feature-extraction" and parameters.get(PARAMETER) is not None:
        raise InvalidInput(f"{PARAMETER} applies to sparse (SPLADE) models only; this task computes dense vectors")


def active_dims(parameters: dict[str, Any], layout: ModelLayout, width: int | None = None) -> int:
    """The most entries each vector keeps: the parameter, else the files', else the default; at most width."""
    asked = parameters.get(PARAMETER)
    dims = int(asked) if asked is not None else layout.max_active_dims or DEFAULT_MAX_ACTIVE_DIMS
    return min(dims, width) if width else dims


def answer_bytes(inputs: int, dims: int) -> int:
    """The JSON bytes of an answer of inputs vectors of at most dims entries each."""
    return inputs * dims * ENTRY_BYTES
