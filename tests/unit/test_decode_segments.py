"""How decoding rows are split into attention calls: the cheapest split, found exactly."""

from __future__ import annotations

import itertools
import random

from models_registry.inference.decode_segments import split


def cost(ranges: list[tuple[int, int]], slots: list[int], lengths: list[int], call_cost: int) -> int:
    """What a split costs: a call each, and each range's slots read to its longest row."""
    return sum(call_cost + (slots[end - 1] - slots[first] + 1) * max(lengths[first:end]) for first, end in ranges)


def every_split(count: int) -> list[list[tuple[int, int]]]:
    """All ways to cut rows [0, count) into consecutive ranges."""
    splits = []
    for cuts in itertools.product((False, True), repeat=count - 1):
        bounds = [0] + [n + 1 for n, cut in enumerate(cuts) if cut] + [count]
        splits.append(list(zip(bounds, bounds[1:])))
    return splits


def test_without_a_call_cost_every_row_is_one_call() -> None:
    assert split([0, 1, 5, 9], [10, 300, 20, 7], None) == [(0, 4)]
    assert split([], [], None) == [] and split([], [], 32) == []


def test_rows_of_one_length_in_neighbouring_slots_stay_one_call() -> None:
    assert split(list(range(8)), [100] * 8, 32) == [(0, 8)]


def test_a_long_row_among_short_ones_gets_a_call_of_its_own() -> None:
    assert split([0, 1, 2, 3], [40, 40, 900, 40], 32) == [(0, 2), (2, 3), (3, 4)]


def test_far_apart_slots_are_not_read_through_when_a_call_is_cheaper() -> None:
    assert split([0, 60], [50, 50], 32) == [(0, 1), (1, 2)]
    assert split([0, 2], [50, 50], 1000) == [(0, 2)]  # a costly call: the slot between is read, masked


def test_the_split_is_the_cheapest_of_all() -> None:
    rng = random.Random(7)
    for _ in range(200):
        count = rng.randint(1, 8)
        slots = sorted(rng.sample(range(20), count))
        lengths = [rng.randint(1, 300) for _ in range(count)]
        call_cost = rng.choice([0, 8, 32, 200])
        got = split(slots, lengths, call_cost)
        assert [first for first, _ in got] == [0] + [end for _, end in got[:-1]] and got[-1][1] == count
        assert cost(got, slots, lengths, call_cost) == min(cost(s, slots, lengths, call_cost) for s in every_split(count))


def every_first(slots: list[int], lengths: list[int], call_cost: int) -> list[tuple[int, int]]:
    """split's search without its pruning: every range end against every range start (the quadratic loop)."""
    count = len(slots)
    best, cut = [0] * (count + 1), [0] * (count + 1)
    for end in range(1, count + 1):
        longest, cheapest, start_at = 0, -1, 0
        for first in range(end - 1, -1, -1):
            longest = max(longest, lengths[first])
            cost = best[first] + call_cost + (slots[end - 1] - slots[first] + 1) * longest
            if cheapest < 0 or cost < cheapest:
                cheapest, start_at = cost, first
        best[end], cut[end] = cheapest, start_at
    ranges, end = [], count
    while end:
        ranges.append((cut[end], end))
        end = cut[end]
    return ranges[::-1]


def test_the_pruned_search_finds_the_very_split_the_whole_search_finds() -> None:
    rng = random.Random(52)
    for _ in range(400):
        count = rng.randint(1, 120)
        slots = sorted(rng.sample(range(count + rng.randint(0, 40)), count))
        low = rng.choice([1, 20, 200])
        lengths = [rng.randint(low, low + rng.choice([0, 5, 300])) for _ in range(count)]
        call_cost = rng.choice([0, 1, 32, 500])
        assert split(slots, lengths, call_cost) == every_first(slots, lengths, call_cost)
