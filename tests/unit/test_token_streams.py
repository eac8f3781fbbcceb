"""The worker's token streams: what a stream was sent is out before its answer, and counted for it."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from models_registry.broker import messages
from models_registry.core.batch_types import Batch, Item, PendingRequest
from models_registry.worker.delivery import Delivery
from models_registry.worker.token_streams import TokenStreams


class FakeLayer:
    """Records the token messages sent, one list per round trip."""

    def __init__(self) -> None:
        self.trips: list[list[tuple[str, dict[str, Any]]]] = []

    async def send_replies(self, replies: list[tuple[str, dict[str, Any]]], *args: Any) -> int:
        self.trips.append(list(replies))
        await asyncio.sleep(0.01)
        return len(replies)


def streamed(request_id: str) -> Item[Delivery]:
    request: PendingRequest[Delivery] = PendingRequest(
        id=request_id, key=("m", "t"), n_items=1, arrival=0.0, deadline=1e12,
        delivery=Delivery(reply=f"reply!{request_id}", parameters={"stream": True}))
    return Item(request, 0, "prompt", 1, 0.0, 0)


async def test_closing_sends_what_was_put_and_counts_the_messages_of_each_stream() -> None:
    layer = FakeLayer()
    streams = TokenStreams(layer)  # type: ignore[arg-type]
    a, b = streams.open(Batch(("m", "t"), [streamed("a"), streamed("b")], "test"))
    assert a is not None and b is not None

    def compute() -> None:  # the compute thread puts events; the loop has not run its flush yet
        a.put({"n": 1})
        b.put({"n": 1})

    thread = threading.Thread(target=compute)
    thread.start()
    thread.join()
    await asyncio.sleep(0)  # its flush runs: one message each
    a.put({"n": 2})
    assert streams.close([a, b]) == {"a": 2, "b": 1}  # a's second event was flushed by close, not later
    for _ in range(50):
        if sum(len(trip) for trip in layer.trips) == 3:
            break
        await asyncio.sleep(0.01)
    sent = [messages.read_reply(message) for trip in layer.trips for _, message in trip]
    assert sorted((m.id, m.seq) for m in sent) == [("a", 0), ("a", 1), ("b", 0)]  # type: ignore[union-attr]
    # Both flushes queued before the sender's first turn: one round trip carries them together.
    assert len(layer.trips) == 1


async def test_a_gone_client_is_cancelled_and_asked_about_once(monkeypatch: Any) -> None:
    asked: list[list[str]] = []

    async def still_wanted(layer: Any, model: str, task: str, request_ids: list[str]) -> set[str]:
        asked.append(list(request_ids))
        return {"kept"}

    monkeypatch.setattr("models_registry.worker.token_streams.admission.still_wanted", still_wanted)
    streams = TokenStreams(FakeLayer())  # type: ignore[arg-type]
    gone, kept = streams.open(Batch(("m", "t"), [streamed("gone"), streamed("kept")], "test"))
    assert gone is not None and kept is not None
    await streams._cancel_abandoned()
    await streams._cancel_abandoned()
    assert gone.cancelled() and not kept.cancelled()
    assert asked == [["gone", "kept"], ["kept"]]  # the second check leaves the cancelled one out
    streams.close([gone, kept])
