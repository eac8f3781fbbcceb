"""Reuse of a shared prompt head's KV cache across requests (vLLM's prefix caching, in blocks of tokens).

A service sends the same system prompt before every question: computing its keys and values
again for each request is most of a long prompt's prefill. After a prompt is prefilled alone,
its cache up to the last whole block before its final token is kept, keyed by a chain of block
hashes (block i's key hashes block i-1's key with block i's tokens, so a key names the whole
prefix). A new prompt looks its blocks up from the longest down and prefills only what follows
the longest kept prefix. Entries are evicted least recently used first, within a byte budget.
Pure bookkeeping over tensors: the model calls stay in inference.decode_batch.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

BLOCK_TOKENS = 64  # the unit of reuse: a prompt head is shared in whole blocks
MIN_BLOCKS = 2  # heads shorter than this are cheap to prefill again: not kept
DEFAULT_BUDGET_BYTES = 256 * 2**20

KeyValues = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys and values, [1, heads, tokens, head_dim]


@dataclass
class Hit:
    """A kept prefix: how many of the prompt's first tokens it covers, and their keys and values (shared: copy first)."""

    tokens: int
    layers: KeyValues


class PrefixCache:
    """Kept prompt heads of one model, found by their block-hash chain, evicted least recently used first."""

    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES, block: int = BLOCK_TOKENS) -> None:
        self.budget_bytes = budget_bytes
        self.block = block
        self.entries: OrderedDict[int, Hit] = OrderedDict()
        self.bytes = 0
        self.hits = 0
        self.misses = 0

    def chain(self, ids: Sequence[int], blocks: int) -> list[int]:
        """The keys of the first `blocks` whole blocks of ids, each naming the prefix up to its block's end."""
        keys, previous = [], 0
        for index in range(blocks):
            previous = hash((previous, tuple(ids[index * self.block:(index + 1) * self.block])))
            keys.append(previous)
        return keys

    def _reusable_blocks(self, ids: Sequence[int]) -> int:
        # The last token is always computed: its logits give the first new token.
        return (len(ids) - 1) // self.block

    def lookup(self, ids: Sequence[int]) -> Hit | None:
        """The longest kept prefix of ids (shorter than ids), or None."""
        if self.budget_bytes <= 0:
            return None
        blocks = self._reusable_blocks(ids)
        if blocks >= MIN_BLOCKS:
            for key in reversed(self.chain(ids, blocks)[MIN_BLOCKS - 1:]):
                hit = self.entries.get(key)
                if hit is not None:
                    self.entries.move_to_end(key)
                    self.hits += 1
                    return hit
        self.misses += 1
        return None

    def store(self, ids: Sequence[int], layers: KeyValues) -> None:
        """Keep the prompt's head in whole blocks (a copy of layers' first tokens), evicting the oldest to fit."""
        blocks = self._reusable_blocks(ids)
        if self.budget_bytes <= 0 or blocks < MIN_BLOCKS:
            return
        key = self.chain(ids, blocks)[-1]
        if key in self.entries:
            self.entries.move_to_end(key)
            return
        tokens = blocks * self.block
        kept = [(k[:, :, :tokens].clone(), v[:, :, :tokens].clone()) for k, v in layers]
        size = _size(kept)
        if size > self.budget_bytes:
            return
        while self.bytes + size > self.budget_bytes and self.entries:
            _, old = self.entries.popitem(last=False)
            self.bytes -= _size(old.layers)
        self.entries[key] = Hit(tokens, kept)
        self.bytes += size

    def clear(self) -> None:
        """Drop every kept prefix."""
        self.entries.clear()
        self.bytes = 0


def _size(layers: KeyValues) -> int:
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers)
