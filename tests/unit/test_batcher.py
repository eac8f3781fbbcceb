"""The pure batcher: deadlines, caps, idle start, split/reassembly, ordering, isolation."""

from __future__ import annotations

import pytest

from models_registry.core.batch_types import BatchPolicy, ItemFailure, QueueFull, UnknownKey
from models_registry.worker.batcher import Batcher

A = ("model-a", "task")
B = ("model-b", "task")


def make(policy: BatchPolicy = BatchPolicy(max_batch_size=4, max_batch_delay_s=0.010), quiet: float = 0.001) -> Batcher:
    batcher = Batcher(idle_quiet_s=quiet)
    batcher.set_policy(A, policy)
    batcher.set_policy(B, policy)
    return batcher


def submit(batcher: Batcher, key: tuple[str, str], rid: str, n: int, now: float, costs: list[int] | None = None,
           deadline: float = 100.0):
    return batcher.submit(key, rid, [f"{rid}-{i}" for i in range(n)], costs or [5] * n, now, deadline, delivery=None)


def test_deadline_is_counted_from_first_item_and_not_reset_by_later_arrivals() -> None:
    batcher = make(quiet=1.0)  # long quiet time: only the delay may close this batch
    submit(batcher, A, "r1", 1, now=0.000)
    submit(batcher, A, "r2", 1, now=0.006)
    submit(batcher, A, "r3", 1, now=0.009)
    assert batcher.next_batch(now=0.0099, idle=True) is None
    assert batcher.next_wakeup(now=0.0099) == pytest.approx(0.010)
    batch = batcher.next_batch(now=0.010, idle=True)
    assert batch is not None and batch.reason == "delay"
    assert [i.request.id for i in batch.items] == ["r1", "r2", "r3"]


def test_size_cap_closes_a_batch_at_once_and_leaves_the_rest() -> None:
    batcher = make()
    for n in range(6):
        submit(batcher, A, f"r{n}", 1, now=0.0)
    batch = batcher.next_batch(now=0.0, idle=False)
    assert batch is not None and batch.reason == "size" and len(batch) == 4
    assert batcher.depth(A) == 2
    assert batcher.next_batch(now=0.0, idle=False) is None  # 2 < cap, delay not reached, busy


def test_idle_worker_starts_once_nothing_more_arrives() -> None:
    batcher = make(BatchPolicy(max_batch_size=32, max_batch_delay_s=1.0), quiet=0.001)
    submit(batcher, A, "r1", 1, now=0.0)
    assert batcher.next_batch(now=0.0005, idle=True) is None  # still inside the quiet time
    assert batcher.next_batch(now=0.002, idle=False) is None  # busy: wait for size or delay
    batch = batcher.next_batch(now=0.002, idle=True)
    assert batch is not None and batch.reason == "idle" and len(batch) == 1


def test_client_list_larger_than_a_batch_is_split_and_reassembled_in_order() -> None:
    batcher = make()
    request = submit(batcher, A, "big", 10, now=0.0)
    finished = []
    batches = 0
    while (batch := batcher.next_batch(now=1.0, idle=True)) is not None:
        batches += 1
        assert len(batch) <= 4
        finished += batcher.complete(batch, [f"out:{i.payload}" for i in batch.items])
    assert batches == 3
    assert finished == [request]
    assert request.outputs == [f"out:big-{i}" for i in range(10)]
    assert request.error is None and request.done


def test_outputs_return_to_their_own_request_when_sorted_by_length() -> None:
    batcher = make(BatchPolicy(max_batch_size=8, max_batch_delay_s=0.0))
    r1 = batcher.submit(A, "r1", ["long", "short"], [50, 3], 0.0, 100.0, delivery=None)
    r2 = batcher.submit(A, "r2", ["mid"], [20], 0.0, 100.0, delivery=None)
    batch = batcher.next_batch(now=0.0, idle=True)
    assert [i.cost for i in batch.items] == [3, 20, 50]  # sorted: small padding
    done = batcher.complete(batch, [f"out:{i.payload}" for i in batch.items])
    assert set(map(id, done)) == {id(r1), id(r2)}
    assert r1.outputs == ["out:long", "out:short"] and r2.outputs == ["out:mid"]


def test_keys_are_isolated_and_served_oldest_first() -> None:
    batcher = make(BatchPolicy(max_batch_size=4, max_batch_delay_s=0.0))
    submit(batcher, B, "b1", 1, now=0.0)
    submit(batcher, A, "a1", 1, now=0.001)
    first = batcher.next_batch(now=0.01, idle=True)
    second = batcher.next_batch(now=0.01, idle=True)
    assert first.key == B and second.key == A
    assert [i.request.id for i in first.items] == ["b1"]
    assert [i.request.id for i in second.items] == ["a1"]


def test_queue_full_rejects_without_queueing_anything() -> None:
    batcher = make(BatchPolicy(max_batch_size=2, max_queue_size=3))
    submit(batcher, A, "r1", 2, now=0.0)
    with pytest.raises(QueueFull):
        submit(batcher, A, "r2", 2, now=0.0)
    assert batcher.depth(A) == 2
    submit(batcher, B, "other", 3, now=0.0)  # another task's queue is unaffected
    with pytest.raises(UnknownKey):
        submit(batcher, ("nope", "task"), "r3", 1, now=0.0)


def test_expired_requests_are_dropped_before_compute() -> None:
    batcher = make(quiet=0.0)
    submit(batcher, A, "late", 2, now=0.0, deadline=0.5)
    submit(batcher, A, "fine", 1, now=0.0, deadline=5.0)
    expired = batcher.drop_expired(now=1.0)
    assert [r.id for r in expired] == ["late"]
    batch = batcher.next_batch(now=1.0, idle=True)
    assert [i.request.id for i in batch.items] == ["fine"]


def test_a_failed_item_fails_only_its_request_and_drops_its_queued_items() -> None:
    batcher = make(BatchPolicy(max_batch_size=2, max_batch_delay_s=0.0))
    bad = submit(batcher, A, "bad", 3, now=0.0)
    good = submit(batcher, A, "good", 1, now=0.0)
    batch = batcher.next_batch(now=0.0, idle=True)
    outputs = [ItemFailure(ValueError("boom")) if i.request is bad else "ok" for i in batch.items]
    finished = batcher.complete(batch, outputs)
    assert bad in finished and isinstance(bad.error, ValueError)
    while (batch := batcher.next_batch(now=0.0, idle=True)) is not None:
        assert all(i.request is not bad for i in batch.items)
        finished += batcher.complete(batch, ["ok"] * len(batch))
    assert good in finished and good.outputs == ["ok"] and good.error is None


def test_token_budget_limits_padded_tokens_and_keeps_the_oldest() -> None:
    policy = BatchPolicy(max_batch_size=64, max_batch_tokens=100, max_batch_delay_s=0.0)
    batcher = make(policy)
    batcher.submit(A, "first", ["x"], [40], 0.0, 100.0, delivery=None)
    batcher.submit(A, "rest", [f"y{i}" for i in range(6)], [10, 37, 12, 43, 90, 39], 0.0, 100.0, delivery=None)
    batch = batcher.next_batch(now=0.0, idle=True)
    assert batch.reason == "tokens"
    assert "first" in {i.request.id for i in batch.items}
    assert batch.padded_tokens <= 100
    assert sorted(i.cost for i in batch.items) == [39, 40]  # nearest in length to the oldest


def test_a_single_input_over_the_budget_still_runs_alone() -> None:
    batcher = make(BatchPolicy(max_batch_size=8, max_batch_tokens=16, max_batch_delay_s=0.0))
    batcher.submit(A, "huge", ["x", "y"], [500, 4], 0.0, 100.0, delivery=None)
    first = batcher.next_batch(now=0.0, idle=True)
    assert [i.cost for i in first.items] == [500]
    second = batcher.next_batch(now=0.0, idle=True)
    assert [i.cost for i in second.items] == [4]


def test_policy_validation_says_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="max_batch_size"):
        BatchPolicy(max_batch_size=0)
    with pytest.raises(ValueError, match="max_queue_size"):
        BatchPolicy(max_queue_size=0)


def test_removing_a_key_returns_its_waiting_requests() -> None:
    batcher = make()
    r = submit(batcher, A, "r1", 2, now=0.0)
    assert batcher.remove(A) == [r]
    assert batcher.depth(A) == 0 and A not in batcher.keys()


def test_a_queue_another_scheduler_orders_is_handed_over_whole_whatever_the_policy() -> None:
    batcher = make(quiet=1.0)  # no batch would be due yet: neither size nor delay nor quiet
    for n in range(6):
        submit(batcher, A, f"r{n}", 1, now=0.001 * n)
    submit(batcher, B, "other", 1, now=0.0)
    batch = batcher.hand_over(A, now=0.006, keep=lambda item: item.request.id != "r3")
    assert batch is not None and batch.reason == "handover"
    assert [i.request.id for i in batch.items] == ["r0", "r1", "r2", "r4", "r5"]  # arrival order, past the cap of 4
    assert all(i.request.started_at == 0.006 for i in batch.items)
    assert batcher.depth(A) == 1 and batcher.depth(B) == 1  # the one it did not take stays; other keys untouched
    assert batcher.hand_over(A, now=0.007, keep=lambda item: False) is None
    assert len(batcher.complete(batch, ["ok"] * len(batch.items))) == 5  # still answered through the ledger
