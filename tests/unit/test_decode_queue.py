"""The pure decode scheduler: who joins a running decode batch, when, and in what order."""

from __future__ import annotations

from models_registry.inference.decode_queue import AGING_S, DecodeQueue, Entry


def entry(name: str, tokens: int = 100, prompt: int = 10, at: float = 0.0, priority: str = "interactive",
          client: str = "") -> Entry[str]:
    return Entry(id=name, tokens=tokens, prompt_tokens=prompt, arrival=at, payload=name, priority=priority,
                 client=client)


def names(entries: list[Entry[str]]) -> list[str]:
    return [e.id for e in entries]


def test_requests_join_while_rows_are_free_and_leave_at_once() -> None:
    queue: DecodeQueue[str] = DecodeQueue(max_rows=2)
    for n, name in enumerate("abc"):
        queue.add(entry(name, at=n))
    assert names(queue.admit(10)) == ["a", "b"] and names(queue.waiting) == ["c"]
    assert queue.admit(10) == []  # no free row
    assert queue.leave("a") is not None
    assert names(queue.admit(10)) == ["c"] and set(queue.running) == {"b", "c"}
    assert queue.leave("nope") is None


def test_the_padded_cache_stays_within_the_token_budget() -> None:
    queue: DecodeQueue[str] = DecodeQueue(max_rows=8, token_budget=400)
    queue.add(entry("long", tokens=200, at=0))
    queue.add(entry("short", tokens=50, at=1))
    queue.add(entry("third", tokens=50, at=2))
    # two rows padded to 200 fit; a third would make 600
    assert names(queue.admit(5)) == ["long", "short"] and queue.padded_tokens() == 400
    queue.leave("long")
    assert names(queue.admit(5)) == ["third"] and queue.padded_tokens() == 100
    assert not queue.fits_alone(entry("huge", tokens=401))


def test_a_waiting_long_request_is_not_passed_by_later_short_ones() -> None:
    queue: DecodeQueue[str] = DecodeQueue(max_rows=8, token_budget=300)
    queue.add(entry("running", tokens=100, at=0))
    queue.admit(0)
    queue.add(entry("long", tokens=250, at=1))
    queue.add(entry("short", tokens=10, at=2))
    assert queue.admit(3) == []  # long waits for room; short waits behind it
    queue.leave("running")
    assert names(queue.admit(3)) == ["long"]


def test_interactive_goes_first_until_batch_work_has_aged() -> None:
    queue: DecodeQueue[str] = DecodeQueue(max_rows=1)
    queue.add(entry("batch", at=0, priority="batch"))
    queue.add(entry("interactive", at=1))
    assert names(queue.admit(2)) == ["interactive"]
    queue.leave("interactive")
    queue.add(entry("later", at=AGING_S - 1))
    assert names(queue.admit(AGING_S + 0.5)) == ["batch"]  # waited AGING_S: counts as interactive, earlier


def test_a_client_with_rows_running_yields_to_one_without() -> None:
    queue: DecodeQueue[str] = DecodeQueue(max_rows=3)
    for n in range(2):
        queue.add(entry(f"greedy-{n}", at=n, client="greedy"))
    queue.admit(5)
    queue.add(entry("greedy-2", at=2, client="greedy"))
    queue.add(entry("other", at=3, client="other"))
    assert names(queue.admit(5)) == ["other"]


def test_prefill_may_be_bounded_per_step_but_one_always_joins() -> None:
    queue: DecodeQueue[str] = DecodeQueue(max_rows=8, prefill_tokens=100)
    queue.add(entry("big", prompt=500, tokens=600, at=0))
    queue.add(entry("a", prompt=60, at=1))
    queue.add(entry("b", prompt=60, at=2))
    assert names(queue.admit(3)) == ["big"]
    assert names(queue.admit(3)) == ["a"]
    assert names(queue.admit(3)) == ["b"]


def test_when_rows_are_full_the_client_with_the_most_rows_yields_one_per_step() -> None:
    queue: DecodeQueue[str] = DecodeQueue(max_rows=4)
    for n in range(4):
        queue.add(entry(f"a{n}", at=n, client="a"))
    queue.next_turn(10)
    for n in range(3):
        queue.add(entry(f"b{n}", at=20 + n, client="b"))
    turn = queue.next_turn(21)
    # a's latest row yields (least work to redo) and b's first request takes it, at once
    assert names(turn.preempted) == ["a3"] and names(turn.joined) == ["b0"]
    assert queue.rows_by_client() == {"a": 3, "b": 1} and turn.preempted[0].preempted == 1
    turn = queue.next_turn(22)
    assert names(turn.preempted) == ["a2"] and names(turn.joined) == ["b1"]
    # shares are even: b's third request waits, a's rows are not taken back and forth
    turn = queue.next_turn(23)
    assert turn.preempted == [] and turn.joined == []
    assert queue.rows_by_client() == {"a": 2, "b": 2}
    queue.leave("b0")
    # the free row goes to the client with fewer rows (b), a's yielded rows wait behind it
    assert names(queue.next_turn(24).joined) == ["b2"]
    queue.leave("a0")
    assert names(queue.next_turn(25).joined) == ["a2"]  # a's earliest yielded row resumes first


def test_one_client_alone_is_never_preempted_by_itself() -> None:
    queue: DecodeQueue[str] = DecodeQueue(max_rows=2)
    for n in range(4):
        queue.add(entry(f"a{n}", at=n, client="a"))
    queue.next_turn(5)
    turn = queue.next_turn(6)
    assert turn.preempted == [] and turn.joined == []
    assert set(queue.running) == {"a0", "a1"}


def test_a_lower_priority_row_yields_to_interactive_work_but_not_the_reverse() -> None:
    queue: DecodeQueue[str] = DecodeQueue(max_rows=2)
    queue.add(entry("job0", at=0, priority="batch", client="jobs"))
    queue.add(entry("job1", at=1, priority="batch", client="jobs2"))
    queue.next_turn(2)
    queue.add(entry("chat", at=3, client="chat"))
    turn = queue.next_turn(3.5)  # the batch rows have not aged yet: one yields to the interactive request
    assert names(turn.preempted) == ["job1"] and names(turn.joined) == ["chat"]
    queue.add(entry("job2", at=4, priority="batch", client="jobs3"))
    assert queue.next_turn(4.5).preempted == []  # batch work waiting never takes an interactive row
    # once it has waited AGING_S it counts as interactive, and clients with even shares keep their rows
    assert queue.next_turn(4 + AGING_S).preempted == []


def test_a_client_over_its_share_yields_to_a_request_held_back_by_the_token_budget() -> None:
    queue: DecodeQueue[str] = DecodeQueue(max_rows=8, token_budget=400)
    for n in range(4):
        queue.add(entry(f"a{n}", tokens=100, at=n, client="a"))
    queue.next_turn(5)
    queue.add(entry("b", tokens=100, at=6, client="b"))
    turn = queue.next_turn(7)
    assert names(turn.preempted) == ["a3"] and names(turn.joined) == ["b"]
    assert queue.padded_tokens() == 400
