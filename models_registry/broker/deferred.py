"""Writes the web need not wait for, sent together: one pipeline per event-loop turn, not a round trip each.

A served request corrects its token charge to what the worker counted; that changes no
answer, so it waits for the current turn of the event loop to end and goes out with every
other request's in one pipeline: under load, hundreds of requests share a round trip.
The usage ledger's counters (observe.ledger) ride in the same pipeline: HINCRBYs, summed per
field over the turn. Failures are logged and dropped: a charge stays at the web's estimate. (A served request's
admission places are NOT given back here but at once, by the hand-off: a client sending
its next request as soon as it has its answer found them still taken, and was refused.)
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from redis.exceptions import NoScriptError

from models_registry.broker.lua import LuaScript

logger = logging.getLogger(__name__)
TIMEOUT_S = 1.0

# KEYS: usage windows, three per charge; ARGV: one token delta per charge. A window that
# already expired stays gone (as rate_limits.settle).
_SETTLE_MANY = """
for i = 1, #ARGV do
  for j = 1, 3 do
    local key = KEYS[3 * (i - 1) + j]
    if redis.call('EXISTS', key) == 1 then redis.call('HINCRBY', key, 't', ARGV[i]) end
  end
end
return #ARGV
"""
_settle_many = LuaScript(_SETTLE_MANY)


class DeferredWrites:
    """Admission leaves, charge corrections and ledger counts of one web process, flushed once per loop turn."""

    def __init__(self) -> None:
        self._leaves: list[tuple[str, list[str]]] = []
        self._settles: list[tuple[list[str], int]] = []
        # Counters (observe.ledger) add to these hashes' fields directly, then wake() the flush if idle: a
        # request that already scheduled it (its charge's settle) does not come back to this module.
        self.counts: dict[str, dict[str, int]] = {}  # hash key -> field -> sum
        self.idle = True  # no flush scheduled or running
        self._layer: Any = None
        self._task: asyncio.Task[None] | None = None

    def leave(self, layer: Any, pending_key: str, members: list[str]) -> None:
        """Remove members from a pending set soon."""
        self._leaves.append((pending_key, members))
        self._schedule(layer)

    def settle(self, layer: Any, usage_keys: list[str], delta: int) -> None:
        """Add delta tokens to the usage windows (those not yet expired) soon."""
        if delta:
            self._settles.append((usage_keys, delta))
            self._schedule(layer)

    def wake(self, layer: Any) -> None:
        """Send what was added to counts soon (one HINCRBY per field per turn, however many requests added to it)."""
        self._schedule(layer)

    def _schedule(self, layer: Any) -> None:
        self._layer = layer
        if self.idle:
            self.idle = False
            self._task = asyncio.ensure_future(self._flush())

    async def _flush(self) -> None:
        try:
            await asyncio.sleep(0)  # let the rest of this turn's requests join
            while self._leaves or self._settles or self.counts:
                leaves, self._leaves = self._leaves, []
                settles, self._settles = self._settles, []
                counts, self.counts = self.counts, {}
                try:
                    await asyncio.wait_for(self._write(self._layer.connection(0), leaves, settles, counts), TIMEOUT_S)
                except asyncio.CancelledError:
                    raise
                except Exception as error:
                    logger.warning("could not give back %d admissions, correct %d charges or count %d ledger fields: "
                                   "%s", len(leaves), len(settles), sum(len(f) for f in counts.values()), error)
        finally:
            self.idle = True

    async def _write(self, conn: Any, leaves: list[tuple[str, list[str]]], settles: list[tuple[list[str], int]],
                     counts: dict[str, dict[str, int]]) -> None:
        keys = [key for usage_keys, _ in settles for key in usage_keys]
        deltas = [delta for _, delta in settles]
        async with conn.pipeline(transaction=False) as pipe:
            for key, members in leaves:
                pipe.zrem(key, *members)
            for key, fields in counts.items():
                for name, value in fields.items():
                    pipe.hincrby(key, name, value)
            if settles:
                pipe.evalsha(_settle_many.sha, len(keys), *keys, *deltas)
            try:
                await pipe.execute()
            except NoScriptError:  # a restarted Redis: the leaves and counts went; load the script with the settles
                await _settle_many(conn, keys, deltas)


writes = DeferredWrites()
