"""Which slot a joining row of the decode batch takes, and the cached prompt head it starts from."""

from __future__ import annotations

from models_registry.inference.slot_table import MIN_REUSE, SlotTable, common_prefix

HEAD = list(range(100, 100 + 2 * MIN_REUSE))


def test_common_prefix() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([1, 2, 3], [1, 2, 3, 4]) == 3
    assert common_prefix([], [1]) == 0 and common_prefix([5], [6]) == 0
    long = list(range(1000))
    assert common_prefix(long, long[:700] + [-1] + long[701:]) == 700


def test_rows_take_the_lowest_free_slots_and_a_short_shared_head_is_not_worth_reusing() -> None:
    table = SlotTable()
    assert table.take([1, 2, 3], {}).slot == 0
    assert table.take([1, 2, 4], {0: [1, 2]}).slot == 1  # shares 2 tokens: computed, not copied
    seat = table.take([1, 2, 3], {0: [1, 2, 3], 1: [1, 2]})
    assert (seat.slot, seat.source, seat.reused) == (2, None, 0)


def test_a_row_sharing_a_running_rows_head_copies_it_and_always_computes_its_last_token() -> None:
    table = SlotTable()
    table.take(HEAD + [1], {})
    seat = table.take(HEAD + [2, 3], {0: HEAD + [1]})
    assert (seat.slot, seat.source, seat.reused) == (1, 0, len(HEAD))
    same = table.take(HEAD, {0: HEAD + [1], 1: HEAD})
    assert same.source in (0, 1) and same.reused == len(HEAD) - 1  # its logits come from its own last token


def test_a_free_slot_that_still_holds_the_head_is_taken_as_it_is() -> None:
    table = SlotTable()
    first = table.take(HEAD + [1], {})
    table.take([7, 8], {0: HEAD})
    table.give_back(first.slot, HEAD + [1, 9])
    seat = table.take(HEAD + [2], {1: [7, 8]})
    assert (seat.slot, seat.source, seat.reused) == (first.slot, None, len(HEAD))
    table.give_back(seat.slot, HEAD)
    other = table.take([5, 6, 7], {1: [7, 8]})  # no head in common: the lowest free slot, its tokens forgotten
    assert other.slot == 0 and table.kept == {}


def test_a_kept_head_is_reused_only_by_a_row_of_the_same_adapter() -> None:
    """Keys and values depend on the weights: an adapter's row never starts from the base's head, nor the other way."""
    table = SlotTable()
    first = table.take(HEAD + [1], {}, tag="alpha")
    table.give_back(first.slot, HEAD + [1], tag="alpha")
    base = table.take(HEAD + [2], {})
    assert (base.source, base.reused) == (None, 0)
    table.give_back(base.slot, HEAD + [2])
    again = table.take(HEAD + [3], {}, tag="alpha")
    assert (again.source, again.reused) == (None, 0)  # the base's head is kept there now: computed anew
    table.give_back(again.slot, HEAD + [3], tag="alpha")
    last = table.take(HEAD + [4], {}, tag="alpha")
    assert (last.slot, last.reused) == (again.slot, len(HEAD))
