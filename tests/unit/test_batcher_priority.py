"""The pure batcher's priority classes: interactive items first, batch items aged, never starved."""

from __future__ import annotations

from models_registry.core.batch_types import BatchPolicy
from models_registry.worker.batcher import Batcher

A = ("model-a", "task")
B = ("model-b", "task")
POLICY = BatchPolicy(max_batch_size=4, max_batch_delay_s=0.0)


def make(aging_s: float = 1.0) -> Batcher:
    batcher = Batcher(idle_quiet_s=0.0, aging_s=aging_s)
    batcher.set_policy(A, POLICY)
    batcher.set_policy(B, POLICY)
    return batcher


def submit(batcher: Batcher, key: tuple[str, str], rid: str, now: float, priority: str = "interactive",
           n: int = 1, cost: int = 5) -> None:
    batcher.submit(key, rid, [f"{rid}-{i}" for i in range(n)], [cost] * n, now, 100.0, delivery=None, priority=priority)


def ids(batcher: Batcher, now: float) -> list[str]:
    batch = batcher.next_batch(now, idle=True)
    assert batch is not None
    return sorted({i.request.id for i in batch.items})


def test_interactive_items_run_alone_before_older_batch_items() -> None:
    batcher = make()
    submit(batcher, A, "bulk", now=0.00, priority="batch", n=6)
    submit(batcher, A, "ui1", now=0.01)
    submit(batcher, A, "ui2", now=0.02, cost=50)  # far in length: the class still beats padding
    assert ids(batcher, 0.03) == ["ui1", "ui2"]
    # Interactive traffic was just here: batch-only batches are a quarter of max_batch_size.
    sizes = []
    while (batch := batcher.next_batch(0.04, idle=True)) is not None:
        sizes.append(len(batch))
    assert sizes == [1] * 6


def test_without_interactive_traffic_batch_items_fill_whole_batches() -> None:
    batcher = make()
    submit(batcher, A, "ui", now=0.0)
    assert ids(batcher, 0.0) == ["ui"]
    submit(batcher, A, "bulk", now=2.0, priority="batch", n=6)
    first = batcher.next_batch(2.0, idle=True)  # the last interactive arrival is 2 s old
    assert first is not None and len(first) == 4


def test_a_key_with_interactive_items_goes_before_an_older_batch_only_key() -> None:
    batcher = make()
    submit(batcher, A, "bulk", now=0.0, priority="batch")
    submit(batcher, B, "ui", now=0.5)
    assert ids(batcher, 0.6) == ["ui"]
    assert ids(batcher, 0.6) == ["bulk"]


def test_batch_items_age_into_interactive_ones() -> None:
    batcher = make(aging_s=1.0)
    submit(batcher, A, "bulk", now=0.0, priority="batch")
    submit(batcher, B, "ui", now=1.2)
    # At 1.3 the bulk item waited 1.3 s >= aging_s: it is as urgent as "ui" and older.
    assert ids(batcher, 1.3) == ["bulk"]
    assert ids(batcher, 1.3) == ["ui"]


def test_under_constant_interactive_load_batch_items_still_run() -> None:
    batcher = make(aging_s=1.0)
    submit(batcher, A, "bulk", now=0.0, priority="batch", n=4)
    served_bulk_at = None
    for step in range(40):  # a full interactive batch arrives every 0.1 s
        now = step * 0.1
        submit(batcher, A, f"ui{step}", now=now, n=4)
        if "bulk" in ids(batcher, now):
            served_bulk_at = now
            break
    assert served_bulk_at is not None and 1.0 <= served_bulk_at <= 1.1


def test_oldest_aged_item_anchors_the_batch() -> None:
    batcher = make(aging_s=1.0)
    submit(batcher, A, "old-bulk", now=0.0, priority="batch", cost=100)
    for n in range(4):
        submit(batcher, A, f"ui{n}", now=1.5)
    assert "old-bulk" in ids(batcher, 1.5)
