"""A loop that waits with a deadline stops when cancelled, even as what it waits for arrives."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from models_registry.core.waits import event_set, next_item


async def _cancel_as_it_arrives(wait_once: Callable[[], Awaitable[object]], arrive: Callable[[], None]) -> str:
    """Cancel a task looping over wait_once in the same turn as arrive() wakes it: how the task ended."""
    async def loop() -> None:
        while True:
            await wait_once()

    task = asyncio.ensure_future(loop())
    for _ in range(3):
        await asyncio.sleep(0)  # the task is waiting now
    arrive()
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=1.0)
    if not done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return "still running"
    return "cancelled" if task.cancelled() else "ended"


async def test_an_event_set_as_the_waiter_is_cancelled_does_not_swallow_the_cancel() -> None:
    event = asyncio.Event()

    async def once() -> None:
        await event_set(event, 10.0)
        event.clear()

    assert await _cancel_as_it_arrives(once, event.set) == "cancelled"


async def test_asyncio_wait_for_is_what_swallowed_it() -> None:
    """The race the module exists for: with wait_for (Python 3.11) the same loop runs on."""
    import sys

    if sys.version_info >= (3, 12):
        pytest.skip("3.12's wait_for is asyncio.timeout underneath")
    event = asyncio.Event()

    async def once() -> None:
        try:
            await asyncio.wait_for(event.wait(), 10.0)
        except TimeoutError:
            pass
        event.clear()

    assert await _cancel_as_it_arrives(once, event.set) == "still running"


async def test_an_item_put_as_the_reader_is_cancelled_does_not_swallow_the_cancel() -> None:
    queue: asyncio.Queue[int] = asyncio.Queue()
    assert await _cancel_as_it_arrives(lambda: next_item(queue, 10.0), lambda: queue.put_nowait(1)) == "cancelled"


async def test_the_deadlines_hold() -> None:
    assert await event_set(asyncio.Event(), 0.01) is False
    with pytest.raises(TimeoutError):
        await next_item(asyncio.Queue(), 0.01)
    queue: asyncio.Queue[str] = asyncio.Queue()
    queue.put_nowait("x")
    assert await next_item(queue, None) == "x"


async def test_done_within_answers_as_asyncio_wait_and_never_cancels_the_future() -> None:
    from models_registry.core.waits import done_within

    loop = asyncio.get_running_loop()
    pending: asyncio.Future[int] = loop.create_future()
    assert await done_within(pending, 0.01) is False
    assert not pending.cancelled() and not pending._callbacks  # type: ignore[attr-defined]  # nothing left on it
    loop.call_later(0.01, pending.set_result, 1)
    assert await done_within(pending, 5.0) is True and pending.result() == 1
    assert await done_within(pending, 0.0) is True  # done already: at once

    waiting: asyncio.Future[int] = loop.create_future()
    task = asyncio.ensure_future(done_within(waiting, 5.0))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not waiting.cancelled()
