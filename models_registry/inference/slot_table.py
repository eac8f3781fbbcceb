"""Which cache slot a joining row takes, and what cached prompt head it can start from (pure: no torch).

A slot keeps its keys and values after its row leaves, with the tokens they are of, until
another row takes it: a row whose prompt starts with those tokens (a system prompt every
request of a service sends, the n choices of one prompt, a preempted row coming back)
takes that slot and skips computing them, as vLLM's prefix caching does. A running row's
slot is a source too: its head is copied into the new row's slot. At least one prompt
token is always computed, so the row has logits to draw its first token from. Keys and values
are those of the weights that computed them: a head is reused only by a row of the same tag (its
LoRA adapter's identity, "" for the base).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MIN_REUSE = 16  # a shorter shared head is cheaper to compute than to look up and copy


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens a and b share (list comparisons, so at C speed)."""
    n = min(len(a), len(b))
    if not n or a[0] != b[0]:
        return 0
    if a[:n] == b[:n]:
        return n
    low, high = 1, n - 1  # a[:low] == b[:low]; a[:high + 1] != b[:high + 1]
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


@dataclass(frozen=True)
class Seat:
    """Where a joining row goes: its slot, the slot to copy a head from (None: its own), and that head's tokens."""

    slot: int
    source: int | None
    reused: int


class SlotTable:
    """The slots in use and the tokens each free slot still holds."""

    def __init__(self) -> None:
        self.used: set[int] = set()
        # Free slots: the tag of the weights that computed them, and the tokens whose keys and values they hold.
        self.kept: dict[int, tuple[str, list[int]]] = {}

    def take(self, fill: Sequence[int], live: Mapping[int, Sequence[int]], tag: str = "") -> Seat:
        """A slot for a row that must have fill in its cache before it decodes; live: tokens of the slots in use
        whose rows have the same tag (the caller's to choose)."""
        most = len(fill) - 1  # its last token is computed: its logits give the row's next token
        kept = max(((common_prefix(fill, tokens), slot) for slot, (kept_tag, tokens) in self.kept.items()
                    if kept_tag == tag), default=(0, -1))
        running = max(((common_prefix(fill, tokens), slot) for slot, tokens in live.items()), default=(0, -1))
        if min(kept[0], most) >= MIN_REUSE and kept[0] >= running[0]:
            slot, reused, source = kept[1], min(kept[0], most), None
        else:
            slot = self._lowest_free()
            reused = min(running[0], most)
            source = running[1] if reused >= MIN_REUSE else None
            reused = reused if source is not None else 0
        self.kept.pop(slot, None)
        self.used.add(slot)
        return Seat(slot, source, reused)

    def give_back(self, slot: int, tokens: Sequence[int], tag: str = "") -> None:
        """slot's row (of tag) left; its cache still holds tokens (reusable until the slot is taken again)."""
        self.used.discard(slot)
        self.kept[slot] = (tag, list(tokens))

    def clear(self) -> None:
        """Every slot free and empty (the cache was released)."""
        self.used.clear()
        self.kept.clear()

    def _lowest_free(self) -> int:
        """The lowest slot not in use: the decoding rows stay in a dense range."""
        slot = 0
        while slot in self.used:
            slot += 1
        return slot
