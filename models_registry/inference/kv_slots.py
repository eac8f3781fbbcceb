"""The decode batch's KV cache: one preallocated row (slot) per sequence, written in place.

Each layer keeps keys and values as [slots, kv_heads, length, head_dim]. A forward takes
the tokens of every row flattened into one sequence (each with its slot and position):
the model's linear layers run on those tokens alone, with no padding, and the attention
registered here as ATTENTION writes each token's key and value into its slot, then
attends: the decoding rows (one token each) in runs of slots, each over its run's range
masked to each row's length (inference.decode_segments picks the runs); a prompt chunk
over its own slot, causally. Nothing is copied
per step, nor when rows join and leave: the storage is allocated once for every row at
the model's length (SlotCache).
This is transformers' continuous-batching idea (generation/continuous_batching: tokens
packed in one sequence, a cache written in place) with a row per sequence instead of
pages, so that a decode step reads each row's keys where they lie instead of gathering them.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AttentionInterface, PreTrainedConfig

ATTENTION = "hosting_slots"
GROW = 1.5  # a cache of no length limit that must grow takes this much more room than asked
LENGTH_STEP = 64  # lengths are allocated in multiples of this


@dataclass
class Chunk:
    """Tokens [start, end) of the step's sequence: a prompt's chunk for one slot, from position first."""

    start: int
    end: int
    slot: int
    first: int


@dataclass
class DecodeCall:
    """One attention call of decoding rows: the step's tokens [first, end), over slots [low, high) up to length."""

    first: int
    end: int
    low: int
    high: int
    length: int
    mask: torch.Tensor | None = None  # [high - low, 1, 1, length]: each slot's positions (None: all alike)
    index: torch.Tensor | None = None  # where the rows sit within low..high (None: one per slot)


@dataclass
class StepPlan:
    """Where the step's tokens go and what each attends to (built once, read by every layer)."""

    cache: SlotCache
    slots: torch.Tensor  # [tokens]: each token's slot
    positions: torch.Tensor  # [tokens]: each token's position
    decode_tokens: int = 0  # the first decode_tokens tokens decode, one per row, in slot order
    decode_calls: list[DecodeCall] = field(default_factory=list)
    chunks: list[Chunk] = field(default_factory=list)


class SlotCache:
    """Keys and values of every layer, one slot per row: allocated once for every row at the model's length.

    On a CPU the storage is one anonymous memory map for max_slots rows of max_length tokens:
    the system gives it zeroed pages as they are first written, so it costs memory only for
    the positions rows reach, and nothing is ever copied to make room (a growing cache's copy
    and the zeroing of a new one cost seconds on a loaded machine, each time a row needs more).
    Elsewhere (a GPU), where reserving memory commits it, the storage is allocated zeroed once
    for max_slots rows of as many tokens as capacity_bytes holds (max_length when it is not
    given). Only a row longer than that storage, or a model of no length limit, makes it grow
    by a copy. slots and length say how much of it rows have reserved.
    """

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: Any,
                 max_length: int | None, max_slots: int, capacity_bytes: int | None = None) -> None:
        self.layers, self.kv_heads, self.head_dim = layers, kv_heads, head_dim
        self.dtype, self.device, self.max_length, self.max_slots = dtype, device, max_length, max_slots
        self.capacity_bytes = capacity_bytes
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.slots = 0  # reserved: what rows may write and read
        self.length = 0
        self.capacity = (0, 0)  # allocated: (slots, length)
        self.allocations = 0  # storages allocated since the cache was made (one per busy period, unless it grows)

    @property
    def bytes_per_position(self) -> int:
        """Bytes of one token of one slot in every layer's keys and values."""
        return 2 * self.layers * self.kv_heads * self.head_dim * torch.empty((), dtype=self.dtype).element_size()

    def reserve(self, slots: int, length: int) -> None:
        """Room for slots rows of length tokens (allocated once; grown by a copy only past the storage)."""
        if slots <= self.slots and length <= self.length:
            return
        new_slots, new_length = max(slots, self.slots), max(length, self.length)
        if not self.keys or new_slots > self.capacity[0] or new_length > self.capacity[1]:
            self._allocate(new_slots, new_length)
        self.slots, self.length = new_slots, new_length

    def _allocate(self, slots: int, length: int) -> None:
        """Storage for max_slots rows of at least length tokens, what rows wrote so far kept."""
        lazy = torch.device(self.device).type == "cpu"
        if self.max_length and (lazy or not self.capacity_bytes):
            room = self.max_length
        elif self.max_length:
            fits = self.capacity_bytes // (self.max_slots * self.bytes_per_position)  # type: ignore[operator]
            room = min(self.max_length, fits // LENGTH_STEP * LENGTH_STEP)
        else:  # no length limit: room to grow into
            room = -(-int(max(length, self.capacity[1]) * GROW) // LENGTH_STEP) * LENGTH_STEP
        room, rows = max(room, length), max(slots, self.max_slots)
        shape = (2, self.layers, rows, self.kv_heads, room, self.head_dim)
        if lazy:
            count = 2 * self.layers * rows * self.kv_heads * room * self.head_dim
            element = torch.empty((), dtype=self.dtype).element_size()
            pages = mmap.mmap(-1, count * element)  # zero pages, committed as they are first written
            storage = torch.frombuffer(pages, dtype=self.dtype, count=count).view(shape)
        else:
            storage = torch.zeros(shape, dtype=self.dtype, device=self.device)
        keys, values = list(storage[0].unbind(0)), list(storage[1].unbind(0))
        if self.keys and self.slots and self.length:  # past the storage (rare): what the rows hold moves over
            for new, old in zip(keys + values, self.keys + self.values):
                new[:self.slots, :, :self.length] = old[:self.slots, :, :self.length]
        self.keys, self.values = keys, values
        self.capacity = (rows, room)
        self.allocations += 1

    def copy(self, source: int, target: int, tokens: int) -> None:
        """The first tokens of slot source into slot target (a shared prompt head, a forked row)."""
        for store in (self.keys, self.values):
            for tensor in store:
                tensor[target, :, :tokens] = tensor[source, :, :tokens]

    def bytes(self) -> int:
        """What the reserved part of the cache holds at most."""
        return self.slots * self.length * self.bytes_per_position

    def release(self) -> None:
        """Give the memory back (the batch is idle or gone)."""
        self.keys, self.values, self.slots, self.length, self.capacity = [], [], 0, 0, (0, 0)


def attend(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
           attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
           slot_plan: StepPlan | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """The attention of one layer for a step: write the new keys and values in place, then attend.

    query [1, heads, tokens, dim]; key and value [1, kv_heads, tokens, dim]; returns [1, tokens, heads, dim].
    """
    if slot_plan is None:
        raise RuntimeError("the slot attention runs only inside a decode step (GenerationBatch)")
    if kwargs.get("softcap") is not None or kwargs.get("s_aux") is not None:
        raise NotImplementedError("logit soft-capping and attention sinks are not supported by the slot attention")
    plan, layer = slot_plan, module.layer_idx
    keys, values = plan.cache.keys[layer], plan.cache.values[layer]
    keys[plan.slots, :, plan.positions] = key[0].transpose(0, 1)
    values[plan.slots, :, plan.positions] = value[0].transpose(0, 1)
    gqa = query.shape[1] != key.shape[1]
    out = query.new_empty(query.shape[2], query.shape[1], query.shape[3])  # [tokens, heads, dim]
    rows = query[0, :, :plan.decode_tokens].transpose(0, 1).unsqueeze(2)  # [rows, heads, 1, dim]
    for call in plan.decode_calls:
        mine = rows[call.first:call.end]
        if call.index is not None:  # slots in the range that do not decode: a zero query, masked
            spread = mine.new_zeros(call.high - call.low, *mine.shape[1:])
            spread[call.index] = mine
            mine = spread
        got = torch.nn.functional.scaled_dot_product_attention(
            mine, keys[call.low:call.high, :, :call.length], values[call.low:call.high, :, :call.length],
            attn_mask=call.mask, scale=scaling, enable_gqa=gqa)
        if call.index is not None:
            got = got[call.index]
        out[call.first:call.end] = got[:, :, 0]
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
