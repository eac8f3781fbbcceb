"""The contracts of the inference side: what the worker calls on a runner, and what a packed embedding forward is.

Declared once here so the worker types its calls against them and each backend is checked
against them (tests/model/test_backend_protocols.py): torch eager, its TorchScript trace
and ONNX Runtime are all a PackedEncoder. Importing this module loads no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from models_registry.catalog.specs import ModelSpec, TaskSpec

if TYPE_CHECKING:
    import torch


@runtime_checkable
class PackedEncoder(Protocol):
    """One packed forward: the tensors of packed_forward.packed_inputs in, the last hidden state out."""

    row_tokens: int  # the packed row width this backend is fastest at

    def __call__(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Last hidden state, (rows, width, hidden), for one packed forward."""
        ...


class LoadedHandle(Protocol):
    """What the worker reads of a loaded model (inference.loading.LoadedModel is one): nothing concrete here."""

    spec: ModelSpec
    device: str
    pipelines: dict[str, Any]
    backend: dict[str, Any]  # what the heartbeat reports
    media_costs: Any

    def cost_counter(self) -> Any:
        """The model's tokenizer and lengths, for what a request makes it compute."""
        ...

    def count_tokens(self, item: Any) -> int:
        """Tokens an input becomes, capped at the model's length."""
        ...

    def count_inputs(self, task: str, inputs: list[Any]) -> tuple[list[Any], list[int]]:
        """The inputs as a batch carries them (tokenized once where the forward can reuse it), and their tokens."""
        ...


@runtime_checkable
class ModelRunner(Protocol):
    """Loads models and runs batches of one task; every call blocks (the worker calls it from its own threads).

    A model is unloaded by dropping the LoadedModel: nothing else holds its weights.
    """

    default_device: str  # where models go when their registry entry names no device

    def load(self, spec: ModelSpec) -> LoadedHandle:
        """Every pipeline the model's tasks use, warmed up (may raise)."""
        ...

    def run(self, loaded: LoadedHandle, task: TaskSpec, texts: Sequence[Any], parameters: Sequence[dict[str, Any]],
            sinks: Sequence[Any] | None = None) -> list[Any]:
        """One output (or core.batch_types.ItemFailure) per input, in input order; sinks: streamed generation."""
        ...
