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
too much: embeddings.packing_plan decides) the adapter is given per position (BatchRows.for_tokens), and
lora_delta stacks the distinct adapters' A into one (sum of ranks x in) and B into one (out x sum of
ranks), each position keeping only its own adapter's rank columns, scaled: a mask instead of a
per-position gather of weights (which would copy r x in per position), at the cost of every adapter's
rank columns computed for every position. Modules an adapter replaces whole (peft's modules_to_save, a classifier head)
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
    """The stacked LoRA weights of one layer for one batch: A (R x in), B (out x R), each column's slot and scale;
    and per slot, A (slots x r_max x in) and scaled B (slots x out x r_max) padded to the largest rank, slot 0 zeros."""

    a: torch.Tensor
    b: torch.Tensor
    slots: torch.Tensor  # (R,) the slot (1 + the adapter's place in the batch) each rank column belongs to
    scales: torch.Tensor  # (R,) that adapter's scaling
    a_by_slot: torch.Tensor
    b_by_slot: torch.Tensor


def stack_layer(adapters: Sequence[LoraWeights], path: str) -> LayerStack | None:
    """One layer's weights of the batch's adapters, slot k + 1 for adapters[k]; None when none targets it."""
    parts = [(slot, *adapter.layers[path]) for slot, adapter in enumerate(adapters, start=1) if path in adapter.layers]
    if not parts:
        return None
    a = torch.cat([p[1] for p in parts], dim=0)
    b = torch.cat([p[2] for p in parts], dim=1)
    device = a.device
    slots = torch.cat([torch.full((p[1].shape[0],), p[0], dtype=torch.long, device=device) for p in parts])
    scales = torch.cat([torch.full((p[1].shape[0],), float(p[3]), dtype=a.dtype, device=device) for p in parts])
    rank = max(p[1].shape[0] for p in parts)
    a_by_slot = torch.zeros(len(adapters) + 1, rank, a.shape[1], dtype=a.dtype, device=device)
    b_by_slot = torch.zeros(len(adapters) + 1, b.shape[0], rank, dtype=a.dtype, device=device)
    for slot, lora_a, lora_b, scaling in parts:
        a_by_slot[slot, :lora_a.shape[0]] = lora_a
        b_by_slot[slot, :, :lora_a.shape[0]] = lora_b * scaling
    return LayerStack(a, b, slots, scales, a_by_slot, b_by_slot)


def lora_delta(x: torch.Tensor, row_slots: torch.Tensor, stack: LayerStack) -> torch.Tensor:
    """sum over rows' own adapters of scaling * (x @ A.T) @ B.T, for x (N x in) and row_slots (N,): (N x out)."""
    low = x.to(stack.a.dtype) @ stack.a.T  # (N, R): every adapter's rank columns at once
    keep = torch.where(row_slots.unsqueeze(1) == stack.slots.unsqueeze(0), stack.scales.unsqueeze(0),
                       torch.zeros((), dtype=low.dtype, device=low.device))
    return (low * keep) @ stack.b.T


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
        self._stacks: dict[str, LayerStack | None] = {}

    def for_inputs(self, indices: Sequence[int]) -> None:
        """The next forward's rows are these inputs of the batch, in this order (a padded forward)."""
        self.current = self.input_slots[torch.as_tensor(list(indices), dtype=torch.long,
                                                        device=self.input_slots.device)]

    def for_tokens(self, owner: torch.Tensor) -> None:
        """The next forward's positions (rows x width) belong to these inputs (-1: padding, computed as the base)."""
        owner = owner.to(self.input_slots.device)
        self.current = torch.where(owner >= 0, self.input_slots[owner.clamp(min=0)],
                                   torch.full_like(owner, BASE_SLOT))

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
        flat = output.reshape(-1, output.shape[-1])
        # A new tensor either way: the base's output is never written in place.
        flat = flat + lora_delta(flat_x, slots, stack).to(flat.dtype) if stack is not None else flat.clone()
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

    def remove(self) -> None:
        """Take every hook off (the model computes as the base alone again)."""
        for handle in self.hooked.values():
            handle.remove()
        self.hooked.clear()
