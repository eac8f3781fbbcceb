"""Packed forwards in torch: the tensors of a packing plan, and the checks that they match the model's own outputs.

Shared by loading (the packing check), the trace (its own check) and the embedding runs.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from typing import Any

import torch

from models_registry.inference import packing

logger = logging.getLogger(__name__)

PACKING_CHECK_TEXTS = ("Hello there.", "A somewhat longer sentence, to check that packed inputs stay apart.", "ok")


def packed_inputs(forward: packing.PackedForward, ids: Sequence[Sequence[int]], types: Sequence[Sequence[int]] | None,
                  position_offset: int, pad_id: int, device: Any, dtype: Any) -> tuple[dict[str, Any], Any]:
    """The tensors of one packed forward, and the owner input index of every flat position (-1: padding).

    A block-diagonal additive mask keeps packed inputs apart; padding positions attend
    only to themselves (no empty softmax rows); position ids restart at every input.
    """
    width = forward.width
    input_ids: list[int] = []
    positions: list[int] = []
    token_types: list[int] = []
    owner: list[int] = []
    for members in forward.rows:
        for index in members:
            input_ids.extend(ids[index])
            positions.extend(range(position_offset, position_offset + len(ids[index])))
            if types is not None:
                token_types.extend(types[index])
            owner.extend([index] * len(ids[index]))
        padding = width - sum(len(ids[i]) for i in members)
        input_ids.extend([pad_id] * padding)
        positions.extend([position_offset] * padding)
        token_types.extend([0] * padding if types is not None else ())
        owner.extend([-1] * padding)
    shape = (len(forward.rows), width)
    owner_t = torch.tensor(owner, device=device)
    # Padding gets a segment of its own per position: it sees only itself.
    segment = torch.where(owner_t >= 0, owner_t, -1 - torch.arange(len(owner), device=device)).view(shape)
    allowed = (segment.unsqueeze(2) == segment.unsqueeze(1)).unsqueeze(1)
    dtype = dtype if dtype.is_floating_point else torch.float32
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(~allowed, torch.finfo(dtype).min)
    inputs = {"input_ids": torch.tensor(input_ids, device=device).view(shape),
              "position_ids": torch.tensor(positions, device=device).view(shape), "attention_mask": mask}
    if types is not None:
        inputs["token_type_ids"] = torch.tensor(token_types, device=device).view(shape)
    return inputs, owner_t


class EagerEncoder:
    """The model's own forward as a packed encoder (backend.PackedEncoder): inputs -> last hidden state."""

    row_tokens = packing.DEFAULT_ROW_TOKENS

    def __init__(self, model: Any) -> None:
        self.model = model

    def __call__(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """The last hidden state of one packed forward."""
        return self.model(**inputs).last_hidden_state


def relative_error(got: Any, want: Any) -> float:
    """Largest absolute difference over the largest activation of want."""
    got, want = got.float(), want.float()
    return float((got - want).abs().max() / want.abs().max().clamp(min=1e-6))


def output_tolerance(dtype: Any) -> float:
    """How far a rearranged forward (packed, traced) may stray from the model's own outputs."""
    return 2e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-4


def packed_position_offset(model: Any, tokenizer: Any) -> int | None:
    """The position offset under which packed forwards reproduce the model's own outputs; None if none does.

    Checked on real inputs at load: a model that takes no position ids, derives them
    differently, or is causal fails the comparison and keeps padded batches.
    """
    if "position_ids" not in inspect.signature(model.forward).parameters:
        return None
    encoded = tokenizer(list(PACKING_CHECK_TEXTS), truncation=True)
    ids, types = encoded["input_ids"], encoded.get("token_type_ids")
    pad = getattr(model.config, "pad_token_id", None)
    candidates = [0] + ([pad + 1] if isinstance(pad, int) and pad + 1 != 0 else [])
    (forward,) = packing.plan_packing([len(x) for x in ids], row_tokens=sum(len(x) for x in ids))  # one row
    encoder = EagerEncoder(model)
    with torch.inference_mode():
        expected = []
        for position, row in enumerate(ids):
            single = {"input_ids": torch.tensor([row], device=model.device)}
            if types is not None:
                single["token_type_ids"] = torch.tensor([types[position]], device=model.device)
            expected.append(model(**single).last_hidden_state[0])
        for offset in candidates:
            try:
                hidden = encoder(packed_inputs(forward, ids, types, offset, tokenizer.pad_token_id or 0,
                                               model.device, model.dtype)[0])
            except Exception as error:  # the model refuses a 4D mask or position ids
                logger.info("packed forward not possible: %s: %s", type(error).__name__, error)
                return None
            worst = max(relative_error(hidden[p.row, p.start:p.start + p.length], expected[p.index])
                        for p in forward.placements())
            if worst <= output_tolerance(model.dtype):
                return offset
            logger.info("packed forward with position offset %d differs by %.2g (relative)", offset, worst)
    return None
