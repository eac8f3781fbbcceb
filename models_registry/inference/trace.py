"""A TorchScript trace of an encoder's packed forward, for CPU workers.

The trace saves the per-forward Python cost of the model's modules, which small batches
(and one client alone) pay in full. It shares the model's weights; freezing it
(torch.jit.freeze) would copy them for no overall gain. A trace that does not reproduce
the eager outputs on inputs of another shape is thrown away at load.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import torch

from models_registry.inference import packing
from models_registry.inference.packed_forward import (
    PACKING_CHECK_TEXTS,
    EagerEncoder,
    output_tolerance,
    packed_inputs,
    relative_error,
)

logger = logging.getLogger(__name__)


class _PackedEncoder(torch.nn.Module):
    """Keyword inputs in, last hidden state out: a signature a trace can keep."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Any, position_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
        return self.model(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state


def _example_inputs(tokenizer: Any, model: Any, offset: int) -> list[dict[str, Any]]:
    """The check texts packed two ways: all in one row, and in rows as wide as the longest (another shape)."""
    encoded = tokenizer(list(PACKING_CHECK_TEXTS), truncation=True)
    ids, types = encoded["input_ids"], encoded.get("token_type_ids")
    if types is None:
        return []
    lengths = [len(x) for x in ids]
    plans = packing.plan_packing(lengths, row_tokens=sum(lengths)) + packing.plan_packing(lengths, row_tokens=1)
    return [packed_inputs(forward, ids, types, offset, tokenizer.pad_token_id or 0, model.device, model.dtype)[0]
            for forward in plans]


class TracedEncoder:
    """A TorchScript trace of the packed forward as a packed encoder (backend.PackedEncoder)."""

    row_tokens = packing.DEFAULT_ROW_TOKENS

    def __init__(self, module: Any) -> None:
        self.module = module

    def __call__(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """The last hidden state of one packed forward."""
        return self.module(**inputs)


def trace_packed_encoder(model: Any, tokenizer: Any, offset: int) -> TracedEncoder | None:
    """The trace of the model's packed forward; None where tracing fails or differs from the eager outputs."""
    examples = _example_inputs(tokenizer, model, offset)
    if not examples:
        return None
    eager = EagerEncoder(model)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer warnings about Python values: checked below instead
            module = torch.jit.trace(_PackedEncoder(model).eval(), example_kwarg_inputs=examples[0], strict=False)
            module = module.eval()
        with torch.inference_mode():
            for inputs in examples:
                want, got = eager(inputs), module(**inputs)
                if got.shape != want.shape:
                    raise ValueError(f"shape {tuple(got.shape)} instead of {tuple(want.shape)}")
                error = relative_error(got, want)
                if error > output_tolerance(model.dtype):
                    raise ValueError(f"outputs differ by {error:.2g} (relative)")
    except Exception as error:  # any model the tracer cannot take keeps its eager forward
        logger.info("no TorchScript packed encoder: %s: %s", type(error).__name__, error)
        return None
    return TracedEncoder(module)
