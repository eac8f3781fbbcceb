"""The fast lane's choice of rows and its thread beside the batch's forward (no model: rows are stand-ins)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pytest

pytest.importorskip("torch")
from models_registry.inference import fast_lane


@dataclass
class FakeRow:
    """What the lane reads of a generation row."""

    max_new_tokens: int
    fill: list[int] = field(default_factory=lambda: [1, 2, 3])
    cached: int = 3
    decoding: bool = True
    done: bool = False


def test_the_lane_thread_takes_short_rows_with_short_prompts_while_they_are_a_quarter_at_most() -> None:
    longs = [FakeRow(200) for _ in range(8)]
    short, long_prompt = FakeRow(4, fill=list(range(10)), cached=0), FakeRow(4, fill=list(range(100)), cached=0)
    assert fast_lane.threaded_rows(longs + [short, long_prompt]) == [short]
    assert fast_lane.threaded_rows(longs[:3] + [short]) == []  # 1 of 4 rows: more than a quarter of the others
    assert fast_lane.threaded_rows(longs[:4] + [short]) == [short]
    long_prompt.cached = 100 - fast_lane.LANE_PROMPT  # what is left of it fits the lane now
    assert fast_lane.threaded_rows(longs + [short, long_prompt]) == [short, long_prompt]


def test_the_sequential_lane_takes_short_decoding_rows_only() -> None:
    longs = [FakeRow(200) for _ in range(8)]
    short, prefilling = FakeRow(4), FakeRow(4, decoding=False)
    assert fast_lane.sequential_rows(longs + [short, prefilling]) == [short]
    assert fast_lane.sequential_rows(longs[:2] + [short]) == []


def test_the_lane_runs_beside_the_batch_once_at_least_and_stops_when_the_batch_has() -> None:
    lane = fast_lane.LaneThread()
    threads: list[str] = []

    def lane_forward() -> bool:
        threads.append(threading.current_thread().name)
        time.sleep(0.01)
        return True  # always more to do: only the batch's end stops it

    lane.beside(lane_forward, lambda: time.sleep(0.1))
    assert threads and all(name.startswith("fast-lane") for name in threads)
    assert 3 <= len(threads) <= 11  # about ten 10 ms forwards fit in the batch's 100 ms
    threads.clear()
    lane.beside(lane_forward, lambda: None)  # a batch forward of nothing: the lane still moves once
    assert len(threads) == 1


def test_an_error_in_the_lane_is_raised_on_the_compute_thread_after_the_batch_forward() -> None:
    lane = fast_lane.LaneThread()
    ran: list[str] = []

    def failing() -> bool:
        raise RuntimeError("lane broke")

    with pytest.raises(RuntimeError, match="lane broke"):
        lane.beside(failing, lambda: ran.append("batch"))
    assert ran == ["batch"]
    lane.beside(lambda: False, lambda: ran.append("again"))  # the lane is usable after
    assert ran == ["batch", "again"]


def test_a_lane_thread_needs_a_cpu_core_torch_leaves_free() -> None:
    assert not fast_lane.spare_core("meta")
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert fast_lane.spare_core("cpu") == (len(__import__("os").sched_getaffinity(0)) > 1)
    finally:
        torch.set_num_threads(threads)
