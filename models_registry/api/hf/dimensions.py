"""Matryoshka dimensions: the first d components of an embedding, renormalized when the task normalizes.

Done in the web process on the worker's float32 vectors: cutting a normalized vector
and normalizing it again equals normalizing the cut raw vector, so the worker needs
to know nothing about it and a batch mixing sizes stays one group on the device.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from models_registry.catalog.sparse_answer import is_sparse_output
from models_registry.core.errors import InvalidInput
from models_registry.catalog.specs import TaskSpec

KEYS = ("dimensions", "truncate_dim")  # OpenAI's name, sentence-transformers' name
ALLOWED_KEY = "matryoshka_dimensions"  # a task default: the sizes the model was trained for

_native: dict[tuple[Any, ...], int] = {}  # (model, task, load key) -> the model's vector length


def requested(parameters: dict[str, Any]) -> int | None:
    """The size asked for by either name (None: the model's own); both names must agree."""
    values = {parameters[k] for k in KEYS if parameters.get(k) is not None}
    if len(values) > 1:
        raise InvalidInput(f"'dimensions' and 'truncate_dim' disagree ({sorted(values)}); send one of them")
    return values.pop() if values else None


def without_keys(parameters: dict[str, Any]) -> dict[str, Any]:
    """Parameters for the worker: the sizes are applied here, not on the device."""
    return {k: v for k, v in parameters.items() if k not in KEYS and k != ALLOWED_KEY}


def effective_normalize(task: TaskSpec, parameters: dict[str, Any]) -> bool:
    """Whether the task's vectors come back normalized (the request's choice over the task's)."""
    value = parameters.get("normalize")
    return task.normalize if value is None else bool(value)


def check(wanted: int | None, task: TaskSpec, native: int | None, param: str = "dimensions") -> None:
    """400 when wanted is not a size this task serves: over the model's own, or not one it declares."""
    if wanted is None:
        return
    allowed = task.parameters.get(ALLOWED_KEY)
    if allowed and wanted not in allowed and wanted != native:
        sizes = ", ".join(str(s) for s in sorted(allowed))
        error = InvalidInput(f"{param}={wanted} is not one of the sizes this task serves: {sizes}")
        error.param = param  # type: ignore[attr-defined]
        raise error
    if native is not None and wanted > native:
        error = InvalidInput(f"{param}={wanted} is more than the model's {native} dimensions; send 1 to {native}")
        error.param = param  # type: ignore[attr-defined]
        raise error


def known_native(key: tuple[Any, ...]) -> int | None:
    """The vector length seen for this model/task/load key, if any answer was seen yet."""
    return _native.get(key)


def shorten(outputs: list[Any], wanted: int | None, task: TaskSpec, key: tuple[Any, ...], normalize: bool,
            param: str = "dimensions") -> list[Any]:
    """Worker outputs ([float32 bytes, shape] each) cut to wanted components (checked first)."""
    if not outputs:
        return outputs
    if is_sparse_output(outputs[0]):  # its registration read no SpladePooling, this load did: nothing to cut
        if wanted is not None:
            raise InvalidInput(f"{param} does not apply to a sparse (SPLADE) model's vectors")
        return outputs
    native = int(outputs[0][1][-1])
    _native[key] = native
    check(wanted, task, native, param)
    if wanted is None or wanted == native:
        return outputs
    return [_cut(data, shape, wanted, normalize) for data, shape in outputs]


def _cut(data: bytes, shape: list[int], wanted: int, normalize: bool) -> list[Any]:
    array = np.frombuffer(data, dtype="<f4").reshape(shape)[..., :wanted]
    if normalize:
        norms = np.linalg.norm(array, axis=-1, keepdims=True)
        array = array / np.maximum(norms, 1e-12)
    array = np.ascontiguousarray(array, dtype="<f4")
    return [array.tobytes(), list(array.shape)]
