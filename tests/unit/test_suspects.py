"""worker.suspects: a redelivered request runs alone and is named computing first; the rest run together.

The batch loop runs the parts (tests/broker/test_engine.py runs a redelivered request through it)."""

from __future__ import annotations

from models_registry.core.batch_types import Batch, Item, PendingRequest
from models_registry.worker import suspects
from models_registry.worker.delivery import Delivery


def item(name: str, seq: int, lease: tuple[str, bytes] | None = None, suspect: bool = False) -> Item[Delivery]:
    request = PendingRequest(id=name, key=("m", "t"), n_items=1, arrival=0.0, deadline=10.0,
                             delivery=Delivery(reply=f"reply-{name}", lease=lease, suspect=suspect))
    return Item(request, 0, name, 1, 0.0, seq)


def test_a_suspect_runs_alone_named_first_and_the_rest_keep_their_positions() -> None:
    batch = Batch(("m", "t"), [item("a", 0, ("ch", b"a")), item("b", 1, ("ch", b"b"), suspect=True),
                               item("c", 2, ("ch", b"c"))], "size")
    parts = suspects.parts(batch, ["sa", "sb", "sc"])
    assert [([i.payload for i in p.batch.items], p.batch.reason, p.sinks, p.positions, p.named) for p in parts] == [
        (["b"], "isolated", ["sb"], [1], ("ch", b"b")), (["a", "c"], "size", ["sa", "sc"], [0, 2], None)]


def test_a_suspect_without_a_lease_and_plain_requests_run_as_one_batch() -> None:
    batch = Batch(("m", "t"), [item("a", 0), item("b", 1, suspect=True)], "idle")
    [part] = suspects.parts(batch, [None, None])
    assert part.batch is batch and part.positions == [0, 1] and part.named is None


def test_only_suspects_make_only_parts_alone() -> None:
    batch = Batch(("m", "t"), [item("a", 0, ("ch", b"a"), suspect=True), item("b", 1, ("ch", b"b"), suspect=True)],
                  "size")
    assert [p.positions for p in suspects.parts(batch, [None, None])] == [[0], [1]]
