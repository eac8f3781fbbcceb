"""Waiting with a deadline that never swallows a cancellation.

Python 3.11's `asyncio.wait_for` returns the inner result when the waiting task is cancelled
just as that result arrives (gh-86296, fixed by 3.12's rewrite): a loop waiting on an event
then carries on as if nobody had cancelled it, and whoever awaits its end waits forever (a
batch-job driver's `run` did, whenever a job ended as it was stopped). `asyncio.timeout` gives
the cancellation back every time.
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

T = TypeVar("T")


async def event_set(event: asyncio.Event, timeout_s: float | None) -> bool:
    """Whether event is set within timeout_s (None: no deadline)."""
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def next_item(queue: asyncio.Queue[T], timeout_s: float | None) -> T:
    """The queue's next item; TimeoutError when none comes within timeout_s (None: no deadline)."""
    async with asyncio.timeout(timeout_s):
        return await queue.get()


async def done_within(future: asyncio.Future[T], timeout_s: float) -> bool:
    """Whether future is done within timeout_s; the future itself is never cancelled.

    What `asyncio.wait({future}, timeout=...)` answers, for one future, with less machinery:
    one waiter and one timer, no set, counter or per-future loop (every unary request awaits
    its reply this way). A cancellation of the waiting task propagates as it came.
    """
    if future.done():
        return True
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    timer = asyncio.get_running_loop().call_later(timeout_s, wake)
    future.add_done_callback(wake)
    try:
        await waiter
    finally:
        timer.cancel()
        future.remove_done_callback(wake)
    return future.done()
