"""How the decoding rows of a step are split into attention calls: runs of slots, each padded to its longest row.

One call over every decoding row reads every row's keys up to the longest row's length
(the shorter rows masked): on a CPU, where decode attention is bound by reading the cache,
a batch of rows 35 to 280 tokens long reads nearly twice the keys it needs. One call per row
reads only what each needs but pays a call's fixed cost per row, which on a GPU (a kernel
launch) outweighs the reads. split() weighs the two: a call costs call_cost positions, and
each of its slots reads its range's longest length; the cheapest split is found exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

CPU_CALL_COST = 32  # positions one more call costs on a CPU (measured: bench.generation_profile)


def split(slots: Sequence[int], lengths: Sequence[int], call_cost: int | None) -> list[tuple[int, int]]:
    """Ranges [first, end) of the rows (sorted by slot) that attend in one call each; one range when call_cost is None.

    A range's call reads slots slots[first] .. slots[end - 1] (those between that do not
    decode included, masked) up to the longest length among its rows.
    """
    count = len(slots)
    if count == 0:
        return []
    if call_cost is None:
        return [(0, count)]
    best = [0] + [0] * count  # best[end]: the cheapest split of rows [0, end)
    cut = [0] * (count + 1)  # where the last range of that split starts
    for end in range(1, count + 1):
        longest, cheapest, start_at = 0, -1, 0
        last = slots[end - 1]
        for first in range(end - 1, -1, -1):
            length = lengths[first]
            if length > longest:
                longest = length
            cost = best[first] + call_cost + (last - slots[first] + 1) * longest
            if cheapest < 0 or cost < cheapest:
                cheapest, start_at = cost, first
            # No range starting before first costs less than this bound (why: PRUNING, below): the search
            # stops with the same answer, in about linear time, not the whole loop's 24 us a row at 256 rows.
            if first and best[first] + (last - slots[first - 1]) * longest >= cheapest:
                break
        best[end], cut[end] = cheapest, start_at
    ranges: list[tuple[int, int]] = []
    end = count
    while end:
        ranges.append((cut[end], end))
        end = cut[end]
    return ranges[::-1]


# PRUNING: for first' < first, the range [first', end) costs best[first'] + call_cost + (last - slots[first'] + 1) * M'
# with M' >= longest (the longest of rows [first, end)) and M' >= m, the longest of rows [first', first). And
# best[first] <= best[first'] + call_cost + (slots[first - 1] - slots[first'] + 1) * m (that split, then one range
# [first', first)). So that range costs at least best[first] + (last - slots[first - 1]) * M', which is at least
# best[first] + (last - slots[first - 1]) * longest: once that reaches the cheapest so far, none before beats it.
