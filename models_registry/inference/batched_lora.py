"""Several LoRA adapters and the base in one batch: one batched low-rank product per target Linear per forward.

Forward hooks (torch's public `register_forward_hook`) are installed once on a loaded base's target
Linear layers. Before each forward the caller says which adapter each row (or each token, when the
forward packs several inputs into one row) belongs to; each hooked layer then adds

    output[n] += scaling[a(n)] * B[a(n)] @ A[a(n)] @ x[n]

for every row n whose adapter a(n) targets it, as two batched matrix products over the whole batch,
never a forward per adapter nor a copy of the base's weights. Where each row of the forward has one
adapter (a padded forward; a packed one, whose packer keeps each row to one adapter's inputs) each
row's A and B are gathered from the batch's adapters stacked per slot (padded to the largest rank,
zeros for the base) and multiplied with torch.bmm, at the cost of one rank-r product whatever the
number of adapters. Where rows mix adapters (a packed forward whose rows of one adapter each would pad
too much: embeddings.packing_plan decides; every position of a decode step) the adapter is given per
position (BatchRows.for_tokens), and the positions are grouped by adapter once per forward: each layer
then computes each adapter's product on its own positions alone and adds it at them (add_by_segment, a
segmented product as punica's SGMV), never a per-position gather of weights (which would copy r x in per
position) nor every adapter's rank for every position. Modules an adapter replaces whole (peft's modules_to_save, a classifier head)
are computed for that adapter's rows alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.pytorch_utils import Conv1D

BASE_SLOT = 0  # the slot of rows that no adapter computes


@dataclass
class LoraWeights:
    """One adapter's tensors for one loaded model, by the model's own module paths."""

    name: str
    identity: tuple[str, str]  # (source, revision): a changed registration loads anew
    layers: dict[str, tuple[torch.Tensor, torch.Tensor, float]] = field(default_factory=dict)  # A, B, scaling
    saved: dict[str, tuple[torch.Tensor, torch.Tensor | None]] = field(default_factory=dict)  # weight, bias

    @property
    def nbytes(self) -> int:
        """The bytes its tensors hold."""
        tensors = [t for a, b, _ in self.layers.values() for t in (a, b)]
        tensors += [t for w, b in self.saved.values() for t in (w, b) if t is not None]
        return sum(t.numel() * t.element_size() for t in tensors)


@dataclass(frozen=True)
class LayerStack:
    """The LoRA weights of one layer for one batch, per slot: A (slots x r_max x in) and scaled B (slots x out x
    r_max) padded to the largest rank, slot 0 (the base) and the slots of adapters that leave the layer zeros."""

    a_by_slot: torch.Tensor
    b_by_slot: torch.Tensor
    ranks: dict[int, int]  # each slot's own rank, for the slots whose adapter targets the layer


def stack_layer(adapters: Sequence[LoraWeights], path: str) -> LayerStack | None:
    """One layer's weights of the batch's adapters, slot k + 1 for adapters[k]; None when none targets it."""
    parts = [(slot, *adapter.layers[path]) for slot, adapter in enumerate(adapters, start=1) if path in adapter.layers]
    if not parts:
        return None
    first_a, first_b = parts[0][1], parts[0][2]
    rank = max(p[1].shape[0] for p in parts)
    place = {"dtype": first_a.dtype, "device": first_a.device}
    a_by_slot = torch.zeros(len(adapters) + 1, rank, first_a.shape[1], **place)
    b_by_slot = torch.zeros(len(adapters) + 1, first_b.shape[0], rank, **place)
    for slot, lora_a, lora_b, scaling in parts:
        a_by_slot[slot, :lora_a.shape[0]] = lora_a
        b_by_slot[slot, :, :lora_a.shape[0]] = lora_b * scaling
    return LayerStack(a_by_slot, b_by_slot, {p[0]: p[1].shape[0] for p in parts})


def segments(slots: torch.Tensor) -> list[tuple[int, torch.Tensor]]:
    """(slot, the indices of its positions) for every adapter slot among slots (N,), the base's left out."""
    return [(slot, (slots == slot).nonzero().squeeze(1)) for slot in torch.unique(slots).tolist() if slot != BASE_SLOT]


def add_by_segment(output: torch.Tensor, x: torch.Tensor, parts: list[tuple[int, torch.Tensor]],
                   stack: LayerStack) -> torch.Tensor:
    """output (N x out) plus each adapter's scaled (x @ A.T) @ B.T on its own positions of x (N x in), in place.

    Each adapter computes its rank alone on its positions (a segmented product, as punica's SGMV). Measured
    against computing every adapter's rank columns for every position and masking (one product for all):
    8 adapters mixed in MiniLM batches 0.84-0.85x of the base against 0.57-0.64x, and in GPT-2 decode steps
    0.83x against 0.81x (docs/bench/adapters-2core.md).
    """
    for slot, index in parts:
        rank = stack.ranks.get(slot)
        if rank is None:  # this adapter leaves the layer as it is
            continue
        rows = x.index_select(0, index).to(stack.a_by_slot.dtype)
        low = rows @ stack.a_by_slot[slot, :rank].T
        output.index_add_(0, index, (low @ stack.b_by_slot[slot, :, :rank].T).to(output.dtype))
    return output


def lora_delta_by_row(x: torch.Tensor, row_slots: torch.Tensor, stack: LayerStack) -> torch.Tensor:
    """The same for a padded forward, x (rows x positions x in) and row_slots (rows,): each row's own A and B
    gathered (rows x r_max x in), two batched matrix products, whatever the number of adapters."""
    a_rows = stack.a_by_slot[row_slots]
    b_rows = stack.b_by_slot[row_slots]
    return torch.bmm(torch.bmm(x.to(a_rows.dtype), a_rows.transpose(1, 2)), b_rows.transpose(1, 2))


def per_token(row_slots: torch.Tensor, x: torch.Tensor) -> torch.Tensor | None:
    """The slot of every flattened position of x (... x in): row_slots per position, or per leading row (expanded).

    None for an input of one vector per packed row (row_slots rows x width, x rows x in: BERT's pooler
    over a packed forward): several inputs share that row, and no packed embedding reads its output.
    """
    positions = x.numel() // x.shape[-1]
    if row_slots.numel() == positions:
        return row_slots.reshape(-1)
    if row_slots.dim() == 2 and x.dim() == 2 and x.shape[0] == row_slots.shape[0]:
        return None
    if x.dim() >= 3 and row_slots.numel() == x.shape[0]:
        return row_slots.repeat_interleave(positions // x.shape[0])
    raise RuntimeError(f"adapter rows ({row_slots.numel()}) match neither the rows nor the positions of an input "
                       f"of shape {list(x.shape)}")


class BatchRows:
    """One batch's adapters on one model: its inputs' slots, and the slots of the rows of the forward running now."""

    def __init__(self, adapters: Sequence[LoraWeights], input_slots: Sequence[int], device: Any) -> None:
        self.adapters = list(adapters)
        self.input_slots = torch.tensor(list(input_slots), dtype=torch.long, device=device)
        self.current: torch.Tensor | None = None  # the running forward's slot per row or per position
        self._segments: dict[int, list[tuple[int, torch.Tensor]]] = {}  # by positions, for the running forward
        self._stacks: dict[str, LayerStack | None] = {}

    def for_inputs(self, indices: Sequence[int]) -> None:
        """The next forward's rows are these inputs of the batch, in this order (a padded forward)."""
        self.current = self.input_slots[torch.as_tensor(list(indices), dtype=torch.long,
                                                        device=self.input_slots.device)]
        self._segments = {}

    def for_tokens(self, owner: torch.Tensor) -> None:
        """The next forward's positions (rows x width) belong to these inputs (-1: padding, computed as the base)."""
        owner = owner.to(self.input_slots.device)
        self.current = torch.where(owner >= 0, self.input_slots[owner.clamp(min=0)],
                                   torch.full_like(owner, BASE_SLOT))
        self._segments = {}

    def _segments_of(self, slots: torch.Tensor) -> list[tuple[int, torch.Tensor]]:
        """The running forward's positions grouped by adapter: found once, read by every layer."""
        if slots.numel() not in self._segments:
            self._segments[slots.numel()] = segments(slots)
        return self._segments[slots.numel()]

    def stack(self, path: str) -> LayerStack | None:
        """The layer's stacked weights for this batch (built once per batch)."""
        if path not in self._stacks:
            self._stacks[path] = stack_layer(self.adapters, path)
        return self._stacks[path]

    def adjust(self, path: str, x: torch.Tensor, output: torch.Tensor) -> torch.Tensor | None:
        """The layer's output with each row's adapter applied (None: no adapter of the batch touches it)."""
        if self.current is None:
            return None
        stack = self.stack(path)
        saved = [(slot, adapter.saved[path]) for slot, adapter in enumerate(self.adapters, start=1)
                 if path in adapter.saved]
        if stack is None and not saved:
            return None
        if stack is not None and not saved and x.dim() >= 2 and self.current.dim() == 1 \
                and self.current.numel() == x.shape[0]:  # one adapter per row: each row's own weights, gathered
            rows_x = x.reshape(x.shape[0], -1, x.shape[-1])
            return output + lora_delta_by_row(rows_x, self.current, stack).view(output.shape).to(output.dtype)
        slots = per_token(self.current, x)
        if slots is None:
            return None
        flat_x = x.reshape(-1, x.shape[-1])
        # A new tensor either way: the base's output is never written in place.
        flat = output.reshape(-1, output.shape[-1]).clone()
        if stack is not None:
            add_by_segment(flat, flat_x, self._segments_of(slots), stack)
        for slot, (weight, bias) in saved:  # a whole module of the adapter's: its rows only
            rows = slots == slot
            if bool(rows.any()):
                flat[rows] = torch.nn.functional.linear(flat_x[rows].to(weight.dtype), weight, bias).to(flat.dtype)
        return flat.view(output.shape)


def linear_shape(module: torch.nn.Module | None) -> tuple[int, int] | None:
    """(out, in) of a Linear or of GPT-2's Conv1D (x @ W + b, W in x out), read from their sizes, not their
    weights (a packed layer's weight is emptied: inference.cpu_packing); None for any other module."""
    if isinstance(module, torch.nn.Linear):
        return module.out_features, module.in_features
    if isinstance(module, Conv1D):
        return module.nf, module.nx
    return None


class BatchedLora:
    """The hooks on one model's target linear layers (Linear, or GPT-2's Conv1D: the same x @ A.T @ B.T delta), and the batch they read (none between batches)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.modules = dict(model.named_modules())
        self.hooked: dict[str, Any] = {}
        self.active: BatchRows | None = None

    def linear_shape(self, path: str) -> tuple[int, int] | None:
        """(out, in) of the model's linear layer at path: a Linear, or GPT-2's Conv1D (None: neither)."""
        return linear_shape(self.modules.get(path))

    def hook(self, paths: Sequence[str]) -> None:
        """Install the hook on each of these layers not hooked yet (once per layer, for any number of adapters)."""
        for path in paths:
            if path not in self.hooked:
                self.hooked[path] = self.modules[path].register_forward_hook(self._hook_of(path))

    def _hook_of(self, path: str) -> Any:
        def adjust(module: torch.nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> torch.Tensor | None:
            rows = self.active
            return None if rows is None else rows.adjust(path, args[0], output)
        return adjust

    @contextmanager
    def rows(self, adapters: Sequence[LoraWeights], input_slots: Sequence[int]) -> Iterator[BatchRows]:
        """A batch's adapters active on the model while it computes; input_slots: each input's slot (0: base)."""
        rows = BatchRows(adapters, input_slots, next(self.model.parameters()).device)
        self.active = rows
        try:
            yield rows
        finally:
            self.active = None

    @contextmanager
    def row_positions(self, row_adapters: Sequence[LoraWeights | None], counts: Sequence[int]) -> Iterator[None]:
        """The next forward's rows active, row k (adapter row_adapters[k], None the base) owning counts[k] of its
        flattened positions in order (a decode step: one per decoding row, a chunk per prefilling one)."""
        distinct: list[LoraWeights] = []
        for weights in row_adapters:
            if weights is not None and all(weights is not d for d in distinct):
                distinct.append(weights)
        slots = [BASE_SLOT if w is None else 1 + next(i for i, d in enumerate(distinct) if d is w)
                 for w in row_adapters]
        with self.rows(distinct, slots) as batch_rows:
            owner = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(list(counts)))
            batch_rows.for_tokens(owner.to(batch_rows.input_slots.device))
            yield

    def remove(self) -> None:
        """Take every hook off (the model computes as the base alone again)."""
        for handle in self.hooked.values():
            handle.remove()
        self.hooked.clear()
