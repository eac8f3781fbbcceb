"""One forward of the decode batch as tensors: the flattened tokens, their slots and positions, the slot plan.

The scheduler's Forward (inference.decode_plan) becomes one flattened sequence (decoding
rows first, in slot order, then each chunk), with the slot and position of each, the logits
to keep, and the plan the slot attention reads (inference.kv_slots).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from models_registry.inference import decode_segments
from models_registry.inference.decode_plan import Forward
from models_registry.inference.kv_slots import Chunk, DecodeCall, SlotCache, StepPlan


@dataclass
class StepInputs:
    """A forward's model inputs: its token ids, the positions of its kept logits, and the slot attention's plan."""

    ids: list[int]
    keep: list[int]
    plan: StepPlan


def inputs(forward: Forward, cache: SlotCache, device: Any) -> StepInputs:
    """The tensors of forward, its rows' caches at the positions the scheduler planned."""
    decoding = forward.decoding
    ids = [r.last for r in decoding]
    slots = [r.slot for r in decoding]
    positions = [r.cached for r in decoding]
    keep = list(range(len(decoding)))
    for chunk in forward.chunks:
        row = chunk.row
        ids += row.fill[chunk.start:chunk.start + chunk.count]
        slots += [row.slot] * chunk.count
        positions += range(chunk.start, chunk.start + chunk.count)
        if chunk.draws:  # a new row draws its first token from its prompt's last
            keep.append(len(ids) - 1)
    plan = StepPlan(cache, torch.tensor(slots, device=device), torch.tensor(positions, device=device),
                    decode_tokens=len(decoding), decode_calls=decode_calls(decoding, device))
    start = len(decoding)
    for chunk in forward.chunks:
        plan.chunks.append(Chunk(start, start + chunk.count, chunk.row.slot, chunk.start))
        start += chunk.count
    return StepInputs(ids, keep, plan)


def decode_calls(decoding: list[Any], device: Any) -> list[DecodeCall]:
    """The attention calls of the decoding rows (sorted by slot): runs of slots, each masked to its rows' lengths."""
    slots = [r.slot for r in decoding]
    lengths = [r.cached + 1 for r in decoding]
    call_cost = decode_segments.CPU_CALL_COST if torch.device(device).type == "cpu" else None
    calls = []
    for first, end in decode_segments.split(slots, lengths, call_cost):
        low, high = slots[first], slots[end - 1] + 1
        length = max(lengths[first:end])
        call = DecodeCall(first, end, low, high, length)
        if high - low != end - first:  # slots between that do not decode: masked to one position
            call.index = torch.tensor([s - low for s in slots[first:end]], device=device)
        if call.index is not None or min(lengths[first:end]) != length:
            spread = torch.ones(high - low, dtype=torch.long)
            spread[[s - low for s in slots[first:end]]] = torch.tensor(lengths[first:end])
            call.mask = (torch.arange(length)[None] < spread[:, None]).to(device)[:, None, None]
        calls.append(call)
    return calls
