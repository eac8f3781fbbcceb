"""A driver's line slots, shared round-robin between job owners (no I/O: asyncio only).

Every job line takes a slot for the time its request runs. A free slot goes to the next
owner in turn that has a line waiting, not to the oldest line, so one owner's big job
cannot keep another owner's job waiting. An owner answered 429 (its own rate limit or
quota is spent) is paused for the Retry-After and then resumes one line at a time,
doubling on every success (slow start), so its lines neither spin on 429s nor hold slots
the other owners could use.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager


class FairShare:
    """capacity slots, handed out round-robin over the owners waiting for one."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a fair share needs at least one slot, not {capacity}")
        self.capacity = capacity
        self.used = 0
        self.held: dict[Hashable, int] = {}
        self._waiting: OrderedDict[Hashable, deque[asyncio.Future[None]]] = OrderedDict()  # owners in turn
        self._paused_until: dict[Hashable, float] = {}
        self._cap: dict[Hashable, int] = {}  # owners in slow start after a 429: at most this many slots

    @asynccontextmanager
    async def slot(self, owner: Hashable) -> AsyncIterator[None]:
        """Hold one of owner's slots for the duration of the block."""
        await self.acquire(owner)
        try:
            yield
        finally:
            self.release(owner)

    async def acquire(self, owner: Hashable) -> None:
        """Wait for owner's turn at a free slot."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(owner, deque()).append(waiter)
        self._hand_out()
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(owner)  # the slot came just as the waiter left: give it on
            else:
                queue = self._waiting.get(owner)
                if queue is not None and waiter in queue:
                    queue.remove(waiter)
                    if not queue:
                        del self._waiting[owner]
            raise

    def release(self, owner: Hashable) -> None:
        """Give owner's slot back; the next owner in turn gets it."""
        self.used -= 1
        self.held[owner] -= 1
        if not self.held[owner]:
            del self.held[owner]
        self._hand_out()

    def throttle(self, owner: Hashable, seconds: float) -> None:
        """owner was told to wait seconds (429): none of its lines start before, then one at a time."""
        until = time.monotonic() + max(0.0, seconds)
        self._paused_until[owner] = max(until, self._paused_until.get(owner, 0.0))
        self._cap[owner] = 1
        asyncio.get_running_loop().call_later(max(0.0, seconds) + 0.001, self._hand_out)

    def succeeded(self, owner: Hashable) -> None:
        """One of owner's lines was answered: a throttled owner may run twice as many at once."""
        cap = self._cap.get(owner)
        if cap is not None:
            if cap * 2 >= self.capacity:
                del self._cap[owner]
            else:
                self._cap[owner] = cap * 2

    def _eligible(self, owner: Hashable, now: float) -> bool:
        until = self._paused_until.get(owner)
        if until is not None:
            if until > now:
                return False
            del self._paused_until[owner]
        cap = self._cap.get(owner)
        return cap is None or self.held.get(owner, 0) < cap

    def _hand_out(self) -> None:
        now = time.monotonic()
        while self.used < self.capacity:
            owner = next((o for o in self._waiting if self._eligible(o, now)), None)
            if owner is None:
                return
            queue = self._waiting[owner]
            waiter = queue.popleft()
            if queue:
                self._waiting.move_to_end(owner)  # its next line waits for every other owner's turn
            else:
                del self._waiting[owner]
            if waiter.done():  # cancelled while queued
                continue
            self.used += 1
            self.held[owner] = self.held.get(owner, 0) + 1
            waiter.set_result(None)
