"""The decode scheduler's plans, as values: who joins where, who yields, what each forward computes (no torch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from models_registry.inference import decode_scheduler, fast_lane
from models_registry.inference.decode_scheduler import DecodeScheduler
from models_registry.inference.slot_table import MIN_REUSE

HEAD = list(range(1000, 1000 + 4 * MIN_REUSE))  # a system prompt long enough to share


@dataclass(eq=False)
class FakeRow:
    """What the scheduler reads and writes of a generation row; `draw` stands for the executor's token."""

    id: str
    ids: list[int]
    max_new_tokens: int = 50
    tag: str = ""
    joined: float = 0.0
    cached: int = 0
    slot: int = -1
    fill: list[int] = field(default_factory=list)
    history: list[int] = field(default_factory=list)
    last: int = 0
    finished: bool = False
    sequence: Any = field(default_factory=lambda: SimpleNamespace(ids=[]))

    @property
    def tokens(self) -> int:
        return len(self.ids) + self.max_new_tokens

    @property
    def done(self) -> bool:
        return self.finished or len(self.sequence.ids) >= self.max_new_tokens

    @property
    def decoding(self) -> bool:
        return bool(self.history) and self.cached >= len(self.fill)

    def held(self) -> list[int]:
        return (self.history or self.fill)[:self.cached]

    def draw(self, token: int = 7) -> None:
        if not self.history:
            self.history = list(self.ids)
        self.history.append(token)
        self.sequence.ids.append(token)
        self.last = token


def run(scheduler: DecodeScheduler, now: float = 100.0, took: float = 0.01) -> list[dict[str, Any]]:
    """One step as the executor runs it, each forward's rows drawing a token; the forwards, described."""
    plan = scheduler.schedule(now)
    forwards = []
    forward = plan.forward
    while forward is not None:
        forwards.append(forward.describe())
        for row in forward.drawing:
            row.draw()
        forward = scheduler.computed(forward, took, now)
    scheduler.settle()
    return forwards


def prompt(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


def test_rows_join_in_free_slots_and_their_prompts_are_computed_whole_beside_the_decoding_rows() -> None:
    scheduler = DecodeScheduler(max_rows=4)
    a, b = FakeRow("a", prompt(5)), FakeRow("b", prompt(3, 50))
    scheduler.add(a, arrival=0.0)
    scheduler.add(b, arrival=1.0)
    plan = scheduler.schedule(100.0)
    assert plan.describe() == {
        "finished": [], "preempted": [], "seats": [("a", 0, None, 0), ("b", 1, None, 0)],
        "forward": {"decode": [], "chunks": [("a", 0, 5, True), ("b", 0, 3, True)], "copies": [], "lane": False}}
    for row in plan.forward.drawing:
        row.draw()
    scheduler.computed(plan.forward, 0.01, 100.0)
    scheduler.settle()
    c = FakeRow("c", prompt(4, 80))
    scheduler.add(c, arrival=2.0)
    plan = scheduler.schedule(100.0)
    assert plan.describe()["forward"] == {"decode": ["a", "b"], "chunks": [("c", 0, 4, True)], "copies": [],
                                          "lane": False}


def test_a_long_prompt_is_chunked_within_the_prefill_budget_while_the_rows_decode(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decode_scheduler, "FIRST_CHUNK", 10)
    monkeypatch.setattr(decode_scheduler, "MIN_CHUNK", 10)
    monkeypatch.setattr(decode_scheduler, "STEP_S", 0.0)
    scheduler = DecodeScheduler(max_rows=4)
    scheduler.add(FakeRow("short", prompt(3)), arrival=0.0)
    run(scheduler)
    scheduler.add(FakeRow("long", prompt(25, 100)), arrival=1.0)
    steps = [run(scheduler)[0] for _ in range(3)]
    assert [s["chunks"] for s in steps] == [[("long", 0, 10, False)], [("long", 10, 10, False)],
                                            [("long", 20, 5, True)]]
    assert all(s["decode"] == ["short"] for s in steps)
    assert run(scheduler)[0]["decode"] == ["short", "long"]


def test_a_row_starts_from_a_head_kept_in_a_free_slot_and_copies_one_a_running_row_holds() -> None:
    scheduler = DecodeScheduler(max_rows=4)
    first = FakeRow("first", HEAD + [1, 2], max_new_tokens=1)
    keeper = FakeRow("keeper", prompt(3))
    scheduler.add(keeper, arrival=0.0)
    scheduler.add(first, arrival=0.1)
    while first in scheduler.rows or not first.history:
        run(scheduler)  # first drew its one token and left: its slot keeps its head
    again = FakeRow("again", HEAD + [3])
    scheduler.add(again, arrival=1.0)
    plan = scheduler.schedule(100.0)
    assert plan.describe()["seats"] == [("again", 1, None, len(HEAD))]
    assert plan.forward.describe()["chunks"] == [("again", len(HEAD), 1, True)]
    for row in plan.forward.drawing:
        row.draw()
    scheduler.computed(plan.forward, 0.01, 100.0)
    beside = FakeRow("beside", HEAD + [4, 5])  # again runs and holds the head: copied into a new slot
    scheduler.add(beside, arrival=2.0)
    assert scheduler.schedule(100.0).describe()["seats"] == [("beside", 2, 1, len(HEAD))]


def test_a_row_sharing_a_long_head_with_one_prefilled_before_it_waits_and_copies_it() -> None:
    scheduler = DecodeScheduler(max_rows=4)
    choices = [FakeRow(f"choice-{n}", HEAD + HEAD) for n in range(2)]
    for n, row in enumerate(choices):
        scheduler.add(row, arrival=float(n))
    plan = scheduler.schedule(100.0)
    assert [c[0] for c in plan.forward.describe()["chunks"]] == ["choice-0"]  # choice-1 waits for the head
    prefill = [run(scheduler)]
    while not choices[0].decoding:
        prefill.append(run(scheduler))
    copies = [c for step in prefill for f in step for c in f["copies"]]
    assert copies and copies[-1][:2] == (0, 1)  # the head choice-0 computed is copied into choice-1's slot


def test_interactive_rows_join_before_batch_rows_until_those_have_aged() -> None:
    scheduler = DecodeScheduler(max_rows=1)
    scheduler.add(FakeRow("batch", prompt(3), max_new_tokens=1), arrival=0.0, priority="batch")
    scheduler.add(FakeRow("interactive", prompt(3), max_new_tokens=1), arrival=1.0)
    assert scheduler.schedule(2.0).describe()["seats"][0][0] == "interactive"


def test_a_client_over_its_share_yields_a_row_to_another_clients_request() -> None:
    scheduler = DecodeScheduler(max_rows=3)
    flood = [FakeRow(f"flood-{n}", prompt(3, 10 * n)) for n in range(3)]
    for n, row in enumerate(flood):
        scheduler.add(row, arrival=float(n), client="flood")
    run(scheduler)
    other = FakeRow("other", prompt(3, 90))
    scheduler.add(other, arrival=5.0, client="other")
    plan = scheduler.schedule(6.0)
    assert plan.describe()["preempted"] == ["flood-2"]  # the latest of the client holding the most rows
    assert plan.describe()["seats"] == [("other", 2, None, 0)]
    assert flood[2].slot == -1 and flood[2] not in scheduler.rows
    assert [e.payload.id for e in scheduler.queue.waiting] == ["flood-2"]  # it waits again, its tokens kept
    for row in plan.forward.drawing:
        row.draw()
    scheduler.computed(plan.forward, 0.01, 6.0)
    flood[0].finished = True
    scheduler.settle()
    plan = scheduler.schedule(7.0)  # back in a row: its prompt and its token so far computed again, nothing drawn
    assert plan.describe()["seats"] == [("flood-2", 0, None, 0)]
    assert plan.forward.describe()["chunks"] == [("flood-2", 0, len(flood[2].history) - 1, False)]


def test_a_row_told_to_yield_is_not_admitted_back_at_that_step() -> None:
    scheduler = DecodeScheduler(max_rows=4)
    row = FakeRow("r", prompt(3))
    scheduler.add(row, arrival=0.0)
    run(scheduler)
    scheduler.preempt(row)
    plan = scheduler.schedule(100.0)
    assert plan.describe()["preempted"] == ["r"] and plan.forward is None and scheduler.rows == []
    assert scheduler.schedule(100.0).describe()["seats"][0][0] == "r"


def test_done_rows_leave_before_the_step_and_waiting_ones_never_join() -> None:
    scheduler = DecodeScheduler(max_rows=4)
    gone = FakeRow("gone", prompt(3))
    scheduler.add(gone, arrival=0.0)
    gone.finished = True  # its client left while it waited
    plan = scheduler.schedule(100.0)
    assert plan.describe() == {"finished": ["gone"], "preempted": [], "seats": [], "forward": None}
    assert not scheduler.busy()


def test_a_late_short_row_goes_through_the_lane_before_the_batchs_forward() -> None:
    scheduler = DecodeScheduler(max_rows=8)
    longs = [FakeRow(f"long-{n}", prompt(3, 10 * n), max_new_tokens=40) for n in range(4)]
    for n, row in enumerate(longs):
        scheduler.add(row, arrival=float(n))
    run(scheduler)
    scheduler.lane_times.append(0.01)
    scheduler.lane_at, scheduler.step_s = 100.0, 1.0  # a batch forward of 1 s: riding it makes a 4-token row late
    short = FakeRow("short", prompt(2, 90), max_new_tokens=4, joined=100.0)
    scheduler.add(short, arrival=100.0)
    forwards = run(scheduler, now=100.0)
    assert forwards == [
        {"decode": [], "chunks": [("short", 0, 2, True)], "copies": [], "lane": True},
        *[{"decode": ["short"], "chunks": [], "copies": [], "lane": True}] * (fast_lane.FIRST_FORWARDS - 1)]
    assert short.done and short not in scheduler.rows
    assert run(scheduler, now=100.0)[0]["decode"] == [r.id for r in longs]  # never two steps in a row


def test_the_token_budget_bounds_the_padded_cache() -> None:
    scheduler = DecodeScheduler(max_rows=8, token_budget=120)
    rows = [FakeRow(f"r{n}", prompt(10, 10 * n), max_new_tokens=50) for n in range(3)]
    assert scheduler.fits_alone(rows[0]) and not scheduler.fits_alone(FakeRow("huge", prompt(100)))
    for n, row in enumerate(rows):
        scheduler.add(row, arrival=float(n))
    assert [s[0] for s in scheduler.schedule(100.0).describe()["seats"]] == ["r0", "r1"]  # 2 x 60 tokens
