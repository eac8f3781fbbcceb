"""The fast lane's choice: a short row takes it when riding the batch would make it late (pure, no model)."""

from __future__ import annotations

from dataclasses import dataclass, field

from models_registry.inference import fast_lane


@dataclass
class FakeRow:
    """What the lane reads of a generation row."""

    max_new_tokens: int
    drawn: int = 1
    joined: float = 0.0
    decoding: bool = True
    done: bool = False
    fill: list[int] = field(default_factory=lambda: [1, 2, 3])
    cached: int = 3
    sequence: object = field(init=False)

    def __post_init__(self) -> None:
        self.sequence = type("Sequence", (), {"ids": [0] * self.drawn})()


def test_a_row_is_late_when_its_time_so_far_and_a_step_per_token_left_pass_twice_its_time_alone() -> None:
    # Beside 32 rows on a CPU: a step 150 ms, a lane forward 50 ms; a 4-token row alone takes 200 ms.
    assert fast_lane.late(0.15, 3, 4, step_s=0.15, lane_s=0.05)  # 600 ms riding > 400 ms
    assert fast_lane.late(0.3, 1, 4, step_s=0.15, lane_s=0.05)  # 450 ms: still over
    assert not fast_lane.late(0.25, 0, 4, step_s=0.15, lane_s=0.05)
    # Beside 8 rows: a step 65 ms: 4 steps, 260 ms, within 400: it rides the batch.
    assert not fast_lane.late(0.065, 3, 4, step_s=0.065, lane_s=0.05)
    assert fast_lane.late(0.0, 3, 4, step_s=None, lane_s=0.05)  # nothing measured yet: the lane runs once
    assert fast_lane.late(0.0, 3, 4, step_s=0.1, lane_s=None)


def test_the_lane_takes_the_late_short_rows_while_they_are_a_quarter_of_the_decoding_rows_at_most() -> None:
    longs = [FakeRow(200) for _ in range(8)]
    short, on_time, asked_many = FakeRow(4), FakeRow(4, joined=10.0), FakeRow(64)
    rows = longs + [short, on_time, asked_many]
    assert fast_lane.lane_rows(rows, now=10.0, step_s=0.09, lane_s=0.05) == [short]  # on_time just joined: 270 ms
    assert fast_lane.lane_rows(longs[:2] + [short], now=10.0, step_s=0.15, lane_s=0.05) == []  # over a quarter
    prefilling = FakeRow(4, decoding=False)
    assert fast_lane.lane_rows(longs + [prefilling], now=10.0, step_s=0.15, lane_s=0.05) == []
    assert fast_lane.lane_rows(longs + [short], now=10.0, step_s=0.01, lane_s=0.05) == [short]  # 10 s waited


def test_a_joining_row_goes_first_when_even_one_batch_forward_would_make_it_late() -> None:
    # Beside 32 rows: it waited 80 ms for the step to end; a step 160 ms, a lane forward 45 ms: riding the
    # forward that computes its prompt, then three lane forwards, is 375 ms, over twice its 180 ms alone.
    assert fast_lane.first(0.08, 4, step_s=0.16, lane_s=0.045)
    assert not fast_lane.first(0.03, 4, step_s=0.065, lane_s=0.045)  # beside 8 rows: 233 ms
    assert not fast_lane.first(0.08, 4, step_s=0.16, lane_s=None)  # the lane after the forward measures it first
    longs = [FakeRow(200) for _ in range(8)]
    joining = FakeRow(4, decoding=False, fill=list(range(5)), cached=0)
    long_prompt = FakeRow(4, decoding=False, fill=list(range(100)), cached=0)  # its prompt rides the batch
    assert fast_lane.first_rows(longs + [joining, long_prompt], now=0.08, step_s=0.16, lane_s=0.045) == [joining]
    assert fast_lane.first_rows(longs[:2] + [joining], now=0.08, step_s=0.16, lane_s=0.045) == []  # too many
