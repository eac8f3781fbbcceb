"""Sequence packing plans: several inputs share one row of a forward pass, so no compute goes to padding.

Pure (no torch): the runner turns a plan into tensors. Each row holds whole inputs side
by side; a block-diagonal attention mask keeps them from seeing each other and position
ids restart at every input, so each input's output equals its own unpadded forward.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

# Rows of 64-128 tokens are the fastest on CPU for mixed-length sentences: shorter rows
# leave more of each row as padding, rows of 256 and more pay attention over the whole row.
DEFAULT_ROW_TOKENS = 128
# Bounds one forward's activations (rows x width tokens); bigger batches take several.
MAX_TOKENS_PER_FORWARD = 8192


@dataclass(frozen=True)
class Placement:
    """Where one input sits in its forward: input index, row, first position, token count."""

    index: int
    row: int
    start: int
    length: int


@dataclass(frozen=True)
class PackedForward:
    """One forward pass: rows of input indices (in position order), each padded to width."""

    rows: tuple[tuple[int, ...], ...]
    width: int
    lengths: tuple[int, ...]  # token count of every input of the batch, by input index

    def placements(self) -> Iterator[Placement]:
        """Every input of this forward with its place."""
        for row, members in enumerate(self.rows):
            start = 0
            for index in members:
                yield Placement(index=index, row=row, start=start, length=self.lengths[index])
                start += self.lengths[index]

    @property
    def real_tokens(self) -> int:
        """Tokens that belong to inputs."""
        return sum(self.lengths[i] for members in self.rows for i in members)

    @property
    def computed_tokens(self) -> int:
        """Tokens the forward computes (rows x width)."""
        return len(self.rows) * self.width


def plan_packing(lengths: Sequence[int], row_tokens: int = DEFAULT_ROW_TOKENS,
                 max_tokens_per_forward: int = MAX_TOKENS_PER_FORWARD,
                 groups: Sequence[int] | None = None) -> list[PackedForward]:
    """Pack inputs of the given token lengths into rows (first-fit decreasing), rows into forwards.

    A row holds at most max(row_tokens, longest input) tokens, so no input is ever split.
    Rows go into one forward until rows x width would pass max_tokens_per_forward. groups: each
    input's group (its LoRA adapter's slot); a row then holds inputs of one group only, so a
    forward's rows each have one adapter, whatever the mix of the forward.
    """
    if not lengths:
        return []
    if any(n <= 0 for n in lengths):
        raise ValueError("every input needs at least one token")
    capacity = max(row_tokens, max(lengths))
    rows: list[list[int]] = []
    fills: list[int] = []
    group_of = list(groups) if groups is not None else [0] * len(lengths)
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        size = lengths[index]
        for row, filled in enumerate(fills):
            if filled + size <= capacity and group_of[rows[row][0]] == group_of[index]:
                rows[row].append(index)
                fills[row] += size
                break
        else:
            rows.append([index])
            fills.append(size)
    forwards: list[PackedForward] = []
    group: list[int] = []
    for row in range(len(rows)):
        width = max([fills[r] for r in group] + [fills[row]])
        if group and width * (len(group) + 1) > max_tokens_per_forward:
            forwards.append(_forward(rows, fills, group, lengths))
            group = []
        group.append(row)
    forwards.append(_forward(rows, fills, group, lengths))
    return forwards


def _forward(rows: list[list[int]], fills: list[int], group: list[int], lengths: Sequence[int]) -> PackedForward:
    return PackedForward(rows=tuple(tuple(rows[r]) for r in group), width=max(fills[r] for r in group),
                         lengths=tuple(lengths))
