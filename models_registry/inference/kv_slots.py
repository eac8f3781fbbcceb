"""The decode batch's KV cache: one preallocated row (slot) per sequence, written in place.

Each layer keeps keys and values as [slots, kv_heads, length, head_dim]. A forward takes
the tokens of every row flattened into one sequence (each with its slot and position):
the model's linear layers run on those tokens alone, with no padding, and the attention
registered here as ATTENTION writes each token's key and value into its slot, then
attends: the decoding rows (one token each) together over their slots' range, masked
to each row's length; a prompt chunk over its own slot, causally. Nothing is copied
per step; the cache grows (one copy) only when a longer or an extra row needs room.
This is transformers' continuous-batching idea (generation/continuous_batching: tokens
packed in one sequence, a cache written in place) with a row per sequence instead of
pages, so that a decode step reads each row's keys where they lie instead of gathering them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AttentionInterface, PreTrainedConfig

ATTENTION = "hosting_slots"
GROW = 1.5  # a cache that must grow takes this much more room than asked, so it seldom grows again
LENGTH_STEP = 64  # lengths are allocated in multiples of this


@dataclass
class Chunk:
    """Tokens [start, end) of the step's sequence: a prompt's chunk for one slot, from position first."""

    start: int
    end: int
    slot: int
    first: int


@dataclass
class StepPlan:
    """Where the step's tokens go and what each attends to (built once, read by every layer)."""

    cache: SlotCache
    slots: torch.Tensor  # [tokens]: each token's slot
    positions: torch.Tensor  # [tokens]: each token's position
    decode_tokens: int = 0  # the first decode_tokens tokens decode, one per row, in slot order
    decode_slots: list[int] = field(default_factory=list)
    decode_mask: torch.Tensor | None = None  # [lo..hi slots, 1, 1, length]: each row's positions
    decode_index: torch.Tensor | None = None  # where the decode rows sit within lo..hi (None: every slot)
    chunks: list[Chunk] = field(default_factory=list)


class SlotCache:
    """Keys and values of every layer, one slot per row; grows on demand, never per step."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: Any,
                 max_length: int | None, max_slots: int) -> None:
        self.layers, self.kv_heads, self.head_dim = layers, kv_heads, head_dim
        self.dtype, self.device, self.max_length, self.max_slots = dtype, device, max_length, max_slots
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.slots = 0
        self.length = 0

    def reserve(self, slots: int, length: int) -> None:
        """Room for slots rows of length tokens (copies what is there when it must grow)."""
        if slots <= self.slots and length <= self.length:
            return
        new_slots = self.slots if slots <= self.slots else max(slots, min(int(self.slots * GROW), self.max_slots))
        new_length = self.length if length <= self.length else max(length, int(self.length * GROW))
        new_length = -(-new_length // LENGTH_STEP) * LENGTH_STEP
        if self.max_length:
            new_length = max(length, self.length, min(new_length, self.max_length))
        shape = (new_slots, self.kv_heads, new_length, self.head_dim)
        for store in (self.keys, self.values):
            for n in range(self.layers):
                grown = torch.zeros(shape, dtype=self.dtype, device=self.device)
                if n < len(store):
                    grown[:self.slots, :, :self.length] = store[n]
                    store[n] = grown
                else:
                    store.append(grown)
        self.slots, self.length = new_slots, new_length

    def copy(self, source: int, target: int, tokens: int) -> None:
        """The first tokens of slot source into slot target (a shared prompt head, a forked row)."""
        for store in (self.keys, self.values):
            for tensor in store:
                tensor[target, :, :tokens] = tensor[source, :, :tokens]

    def bytes(self) -> int:
        """What the cache holds now."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)

    def release(self) -> None:
        """Give the memory back (the batch is idle or gone)."""
        self.keys, self.values, self.slots, self.length = [], [], 0, 0


def attend(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
           attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
           slot_plan: StepPlan | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """The attention of one layer for a step: write the new keys and values in place, then attend.

    query [1, heads, tokens, dim]; key and value [1, kv_heads, tokens, dim]; returns [1, tokens, heads, dim].
    """
    if slot_plan is None:
        raise RuntimeError("the slot attention runs only inside a decode step (DecodeBatch)")
    if kwargs.get("softcap") is not None or kwargs.get("s_aux") is not None:
        raise NotImplementedError("logit soft-capping and attention sinks are not supported by the slot attention")
    plan, layer = slot_plan, module.layer_idx
    keys, values = plan.cache.keys[layer], plan.cache.values[layer]
    keys[plan.slots, :, plan.positions] = key[0].transpose(0, 1)
    values[plan.slots, :, plan.positions] = value[0].transpose(0, 1)
    gqa = query.shape[1] != key.shape[1]
    out = query.new_empty(query.shape[2], query.shape[1], query.shape[3])  # [tokens, heads, dim]
    if plan.decode_tokens:
        lo, hi = plan.decode_slots[0], plan.decode_slots[-1] + 1
        mask = plan.decode_mask
        assert mask is not None
        mine = query[0, :, :plan.decode_tokens].transpose(0, 1).unsqueeze(2)  # [rows, heads, 1, dim]
        if plan.decode_index is not None:  # rows in the range that do not decode: a zero query, masked
            spread = mine.new_zeros(hi - lo, *mine.shape[1:])
            spread[plan.decode_index] = mine
            mine = spread
        length = mask.shape[-1]
        got = torch.nn.functional.scaled_dot_product_attention(
            mine, keys[lo:hi, :, :length], values[lo:hi, :, :length], attn_mask=mask, scale=scaling,
            enable_gqa=gqa)
        if plan.decode_index is not None:
            got = got[plan.decode_index]
        out[:plan.decode_tokens] = got[:, :, 0]
    for chunk in plan.chunks:
        count, end = chunk.end - chunk.start, chunk.first + chunk.end - chunk.start
        mine = query[:, :, chunk.start:chunk.end]
        mask = None
        if chunk.first:  # a later chunk sees the prompt before it whole, and itself causally
            mask = torch.ones(count, end, dtype=torch.bool, device=query.device).tril(chunk.first)
        got = torch.nn.functional.scaled_dot_product_attention(
            mine, keys[chunk.slot:chunk.slot + 1, :, :end], values[chunk.slot:chunk.slot + 1, :, :end],
            attn_mask=mask, is_causal=mask is None, scale=scaling, enable_gqa=gqa)
        out[chunk.start:chunk.end] = got[0].transpose(0, 1)
    return out.unsqueeze(0), None


AttentionInterface.register(ATTENTION, attend)


def configs_of(model: torch.nn.Module) -> list[PreTrainedConfig]:
    """Every config object the model's modules read their attention implementation from."""
    found = {id(model.config): model.config}
    for module in model.modules():
        config = getattr(module, "config", None)
        if isinstance(config, PreTrainedConfig):
            found.setdefault(id(config), config)
    return list(found.values())


@contextmanager
def slot_attention(configs: list[PreTrainedConfig]) -> Iterator[None]:
    """The model attends through the slot cache for the duration (the compute thread runs one forward at a time)."""
    before = [c._attn_implementation_internal for c in configs]
    for config in configs:
        config._attn_implementation_internal = ATTENTION
    try:
        yield
    finally:
        for config, value in zip(configs, before):
            config._attn_implementation_internal = value
