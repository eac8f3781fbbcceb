"""worker.suspects: a redelivered request runs alone and is named computing first; the rest run together."""

from __future__ import annotations

import asyncio
from typing import Any

from models_registry.core.batch_types import Batch, Item, PendingRequest
from models_registry.worker import suspects
from models_registry.worker.delivery import Delivery


def item(name: str, seq: int, lease: tuple[str, bytes] | None = None, suspect: bool = False) -> Item[Delivery]:
    request = PendingRequest(id=name, key=("m", "t"), n_items=1, arrival=0.0, deadline=10.0,
                             delivery=Delivery(reply=f"reply-{name}", lease=lease, suspect=suspect))
    return Item(request, 0, name, 1, 0.0, seq)


def test_a_suspect_runs_alone_named_first_and_outputs_keep_their_order() -> None:
    batch = Batch(("m", "t"), [item("a", 0, ("ch", b"a")), item("b", 1, ("ch", b"b"), suspect=True),
                               item("c", 2, ("ch", b"c"))], "size")
    events: list[Any] = []

    async def run(part: Batch[Delivery], sinks: list[Any]) -> list[Any]:
        events.append(("run", [i.payload for i in part.items], part.reason))
        return [i.payload.upper() for i in part.items]

    async def mark(channel: str, member: bytes | None) -> None:
        events.append(("mark", channel, member))

    outputs = asyncio.run(suspects.run_isolating(batch, [None] * 3, run, mark))
    assert outputs == ["A", "B", "C"]
    assert events == [("mark", "ch", b"b"), ("run", ["b"], "isolated"), ("mark", "ch", None),
                      ("run", ["a", "c"], "size")]


def test_a_suspect_without_a_lease_and_plain_requests_run_as_one_batch() -> None:
    batch = Batch(("m", "t"), [item("a", 0), item("b", 1, suspect=True)], "idle")
    parts: list[list[str]] = []

    async def run(part: Batch[Delivery], sinks: list[Any]) -> list[Any]:
        parts.append([i.payload for i in part.items])
        return [None] * len(part.items)

    async def mark(channel: str, member: bytes | None) -> None:
        raise AssertionError("nothing to name")

    asyncio.run(suspects.run_isolating(batch, [None, None], run, mark))
    assert parts == [["a", "b"]]
