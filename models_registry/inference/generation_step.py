"""What one step of the decode batch computes: a token per decoding row, and chunks of the prompts being prefilled.

The tokens go into one flattened sequence (decoding rows first, in slot order, then each
chunk), with the slot and position of each and the plan the slot attention reads
(inference.kv_slots). Prefill is bounded per step by a token budget; a row whose prompt
shares a long head with a row prefilled before it waits and copies that head once it is
computed, instead of computing it too (the n choices of one prompt, a shared system prompt).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from models_registry.inference import decode_segments
from models_registry.inference.kv_slots import Chunk, DecodeCall, SlotCache, StepPlan
from models_registry.inference.slot_table import common_prefix

WAIT_FOR_HEAD = 64  # a row waits for another's prefill of a head they share when it is this long
COPY_GAIN = 16  # a row copies a head another row computed meanwhile when it gains this many tokens


@dataclass
class Step:
    """One forward's tokens and what to do with its logits."""

    ids: list[int] = field(default_factory=list)
    slots: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    keep: list[int] = field(default_factory=list)  # the tokens whose logits rows draw from
    decoding: list[Any] = field(default_factory=list)  # rows that decode (one token each), in slot order
    chunks: list[tuple[Any, int, bool]] = field(default_factory=list)  # (row, tokens, whether its prompt completes)

    @property
    def prefilled(self) -> int:
        """Prompt tokens in this step."""
        return sum(count for _, count, _ in self.chunks)

    def plan(self, cache: SlotCache, device: Any) -> StepPlan:
        """The slot attention's plan: where each token goes, what each attends to."""
        decoding = self.decoding
        plan = StepPlan(cache, torch.tensor(self.slots, device=device), torch.tensor(self.positions, device=device),
                        decode_tokens=len(decoding), decode_calls=decode_calls(decoding, device))
        start = len(decoding)
        for row, count, _ in self.chunks:
            plan.chunks.append(Chunk(start, start + count, row.slot, row.cached))
            start += count
        return plan


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


def next_step(rows: list[Any], cache: SlotCache, budget: int, join_budget: int = 0) -> Step:
    """The step for rows: every decoding row's next token, then prompt chunks within budget tokens.

    A prompt whose rest fits in one chunk and in join_budget (what is left of it) is computed whole
    from join_budget instead: the short prompts that arrive together all draw their first token
    at the next step (vLLM's scheduler gives waiting requests what its token budget has left, and
    caps a long prompt's share per step), while a long prompt goes on in chunks of budget tokens.
    """
    step = Step()
    step.decoding = sorted((r for r in rows if r.decoding), key=lambda r: r.slot)
    step.ids = [r.last for r in step.decoding]
    step.slots = [r.slot for r in step.decoding]
    step.positions = [r.cached for r in step.decoding]
    step.keep = list(range(len(step.decoding)))
    chunk = budget
    for row in prefilling(rows, cache):
        rest = len(row.fill) - row.cached
        if rest <= min(chunk, join_budget):  # a short prompt (or a long one's last chunk): whole, beside the others
            join_budget -= rest
            count = rest
        else:
            count = min(rest, budget)
            budget -= count
        if count <= 0:
            if budget <= 0 and join_budget <= 0:
                break
            continue
        step.ids += row.fill[row.cached:row.cached + count]
        step.slots += [row.slot] * count
        step.positions += range(row.cached, row.cached + count)
        completes = row.cached + count == len(row.fill)
        if completes and not row.history:  # a new row draws its first token from its prompt's last
            step.keep.append(len(step.ids) - 1)
        step.chunks.append((row, count, completes))
    return step


def prefilling(rows: list[Any], cache: SlotCache) -> list[Any]:
    """Rows with prompt left to compute, in joining order; one waits while another computes a head they share."""
    planned: list[Any] = []
    for row in (r for r in rows if r.cached < len(r.fill)):
        # Keys and values are those of a row's own weights: heads are shared among rows of one adapter (tag).
        live = ((common_prefix(row.fill, other.held()), other.slot) for other in rows
                if other is not row and other.tag == row.tag)
        shared, source = max(live, default=(0, -1))
        reuse = min(shared, len(row.fill) - 1)
        if reuse >= row.cached + COPY_GAIN or reuse == len(row.fill) - 1 > row.cached:  # more of its head (or all)
            cache.copy(source, row.slot, reuse)
            row.cached = reuse
        if len(row.fill) - row.cached >= WAIT_FOR_HEAD and any(
                common_prefix(row.fill, other.fill) - row.cached >= WAIT_FOR_HEAD for other in planned
                if other.tag == row.tag):
            continue  # the other's prefill computes it once; this one copies it afterwards
        planned.append(row)
    return planned
