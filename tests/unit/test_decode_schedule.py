"""The pure decode scheduler: who joins a running decode batch, when, and in what order."""

from __future__ import annotations

from models_registry.worker.decode_schedule import AGING_S, DecodeSchedule, Entry


def entry(name: str, tokens: int = 100, prompt: int = 10, at: float = 0.0, priority: str = "interactive",
          client: str = "") -> Entry[str]:
    return Entry(id=name, tokens=tokens, prompt_tokens=prompt, arrival=at, payload=name, priority=priority,
                 client=client)


def names(entries: list[Entry[str]]) -> list[str]:
    return [e.id for e in entries]


def test_requests_join_while_rows_are_free_and_leave_at_once() -> None:
    schedule: DecodeSchedule[str] = DecodeSchedule(max_rows=2)
    for n, name in enumerate("abc"):
        schedule.add(entry(name, at=n))
    assert names(schedule.admit(10)) == ["a", "b"] and names(schedule.waiting) == ["c"]
    assert schedule.admit(10) == []  # no free row
    assert schedule.leave("a") is not None
    assert names(schedule.admit(10)) == ["c"] and set(schedule.running) == {"b", "c"}
    assert schedule.leave("nope") is None


def test_the_padded_cache_stays_within_the_token_budget() -> None:
    schedule: DecodeSchedule[str] = DecodeSchedule(max_rows=8, token_budget=400)
    schedule.add(entry("long", tokens=200, at=0))
    schedule.add(entry("short", tokens=50, at=1))
    schedule.add(entry("third", tokens=50, at=2))
    # two rows padded to 200 fit; a third would make 600
    assert names(schedule.admit(5)) == ["long", "short"] and schedule.padded_tokens() == 400
    schedule.leave("long")
    assert names(schedule.admit(5)) == ["third"] and schedule.padded_tokens() == 100
    assert not schedule.fits_alone(entry("huge", tokens=401))


def test_a_waiting_long_request_is_not_passed_by_later_short_ones() -> None:
    schedule: DecodeSchedule[str] = DecodeSchedule(max_rows=8, token_budget=300)
    schedule.add(entry("running", tokens=100, at=0))
    schedule.admit(0)
    schedule.add(entry("long", tokens=250, at=1))
    schedule.add(entry("short", tokens=10, at=2))
    assert schedule.admit(3) == []  # long waits for room; short waits behind it
    schedule.leave("running")
    assert names(schedule.admit(3)) == ["long"]


def test_interactive_goes_first_until_batch_work_has_aged() -> None:
    schedule: DecodeSchedule[str] = DecodeSchedule(max_rows=1)
    schedule.add(entry("batch", at=0, priority="batch"))
    schedule.add(entry("interactive", at=1))
    assert names(schedule.admit(2)) == ["interactive"]
    schedule.leave("interactive")
    schedule.add(entry("later", at=AGING_S - 1))
    assert names(schedule.admit(AGING_S + 0.5)) == ["batch"]  # waited AGING_S: counts as interactive, earlier


def test_a_client_with_rows_running_yields_to_one_without() -> None:
    schedule: DecodeSchedule[str] = DecodeSchedule(max_rows=3)
    for n in range(2):
        schedule.add(entry(f"greedy-{n}", at=n, client="greedy"))
    schedule.admit(5)
    schedule.add(entry("greedy-2", at=2, client="greedy"))
    schedule.add(entry("other", at=3, client="other"))
    assert names(schedule.admit(5)) == ["other"]


def test_prefill_is_bounded_per_step_but_one_always_joins() -> None:
    schedule: DecodeSchedule[str] = DecodeSchedule(max_rows=8, prefill_tokens=100)
    schedule.add(entry("big", prompt=500, tokens=600, at=0))
    schedule.add(entry("a", prompt=60, at=1))
    schedule.add(entry("b", prompt=60, at=2))
    assert names(schedule.admit(3)) == ["big"]
    assert names(schedule.admit(3)) == ["a"]
    assert names(schedule.admit(3)) == ["b"]
