"""The packing planner: every input placed once, rows within capacity, forwards within budget."""

from __future__ import annotations

import random

import pytest

from models_registry.inference.packing import plan_packing


def _placed(forwards):
    return sorted((p.index, p.length) for f in forwards for p in f.placements())


def test_every_input_is_placed_exactly_once_with_its_length() -> None:
    lengths = [5, 17, 3, 64, 9, 9, 1, 30]
    forwards = plan_packing(lengths, row_tokens=32)
    assert _placed(forwards) == sorted(enumerate(lengths))


def test_rows_stay_within_capacity_and_inputs_do_not_overlap() -> None:
    rng = random.Random(7)
    lengths = [rng.randint(1, 60) for _ in range(200)]
    for forward in plan_packing(lengths, row_tokens=64):
        for row, members in enumerate(forward.rows):
            used = sum(lengths[i] for i in members)
            assert used <= max(64, max(lengths)) and used <= forward.width
            spans = sorted((p.start, p.start + p.length) for p in forward.placements() if p.row == row)
            assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
            assert spans[0][0] == 0


def test_an_input_longer_than_a_row_gets_a_row_of_its_own_size() -> None:
    (forward,) = plan_packing([300, 10, 20], row_tokens=128)
    assert forward.width == 300
    assert forward.rows[0][0] == 0


def test_packing_removes_most_padding_on_mixed_lengths() -> None:
    rng = random.Random(1)
    lengths = [min(100, max(4, int(rng.lognormvariate(2.7, 0.6)))) for _ in range(32)]
    forwards = plan_packing(lengths, row_tokens=128)
    padded = len(lengths) * max(lengths)
    computed = sum(f.computed_tokens for f in forwards)
    assert sum(f.real_tokens for f in forwards) == sum(lengths)
    assert computed < 0.5 * padded
    assert computed <= 1.25 * sum(lengths)


def test_forwards_split_at_the_token_budget() -> None:
    forwards = plan_packing([100] * 40, row_tokens=100, max_tokens_per_forward=1000)
    assert [len(f.rows) for f in forwards] == [10, 10, 10, 10]
    assert all(f.computed_tokens <= 1000 for f in forwards)


def test_a_single_row_above_the_budget_still_runs() -> None:
    (forward,) = plan_packing([5000], max_tokens_per_forward=1000)
    assert forward.rows == ((0,),)


def test_empty_and_invalid_lengths() -> None:
    assert plan_packing([]) == []
    with pytest.raises(ValueError):
        plan_packing([3, 0])


def test_grouped_inputs_never_share_a_row_and_all_are_placed() -> None:
    lengths = [5, 30, 7, 12, 3, 40, 9, 9, 2, 17]
    groups = [0, 1, 2, 1, 0, 3, 2, 1, 0, 3]  # each input's adapter slot
    forwards = plan_packing(lengths, row_tokens=64, groups=groups)
    placed = [index for forward in forwards for members in forward.rows for index in members]
    assert sorted(placed) == list(range(len(lengths)))
    for forward in forwards:
        for members in forward.rows:
            assert len({groups[i] for i in members}) == 1
            assert sum(lengths[i] for i in members) <= 64
    assert len(plan_packing(lengths, row_tokens=64)) == 1 and sum(len(f.rows) for f in forwards) >= 4
