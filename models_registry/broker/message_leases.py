"""Leased pulls of shared work channels and worker liveness: the worker side of HostingChannelLayer.

A worker pops up to N messages and records them in its own in-flight set in ONE atomic
script; it releases them once answered. A worker killed with SIGKILL leaves its messages
there, and any live worker puts them back on the channel once the dead one's liveness
key has expired: nothing is lost, and no message is handed to two live workers.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

from models_registry.broker import messages
from models_registry.broker.lua import LuaScript

# Returns [message, flag, ...]: flag 1 for a message that was in flight at a worker death
# (its hash is in KEYS[4]; the worker computes it alone), else 0. No death lately: no hash.
# An emptied channel also silences its doorbell (KEYS[5]): the rings of messages this pull took
# would only wake the worker for pulls that find nothing (one per message sent, under load).
_PULL = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, tonumber(ARGV[2]) - tonumber(ARGV[3]))
local popped = redis.call('ZPOPMIN', KEYS[1], ARGV[1])
if #popped > 0 then
  for i = 1, #popped, 2 do redis.call('ZADD', KEYS[2], popped[i + 1], popped[i]) end
  redis.call('SADD', KEYS[3], ARGV[4])
  local struck = redis.call('EXISTS', KEYS[4]) == 1
  for i = 1, #popped, 2 do
    popped[i + 1] = (struck and redis.call('HEXISTS', KEYS[4], redis.sha1hex(popped[i])) == 1) and 1 or 0
  end
end
if KEYS[5] and redis.call('ZCARD', KEYS[1]) == 0 then redis.call('DEL', KEYS[5]) end
return popped
"""

# A dead worker's messages go back on their channels, each marked in KEYS[5] as in flight
# at a death (ARGV[2] '1'; a clean exit that gives messages back passes '0' and marks
# nothing). A marked message is computed alone by the next worker, which names it in its
# computing key (KEYS[7]) first: if that worker dies too, the message is poison and goes
# to the poison list instead (answered 500 by a live worker, never computed again). Only
# the message computing alone at the second death is quarantined, never the others that
# worker held. Messages are named by their hash (channels_redis prefixes random bytes, so
# each serialized message is unique).
_REQUEUE = """
if redis.call('EXISTS', KEYS[3]) == 1 then return -1 end
local items = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local computing = redis.call('GET', KEYS[7])
local requeued = 0
for i = 1, #items, 2 do
  local digest = redis.sha1hex(items[i])
  if ARGV[2] == '1' and digest == computing and redis.call('HEXISTS', KEYS[5], digest) == 1 then
    redis.call('HDEL', KEYS[5], digest)
    redis.call('RPUSH', KEYS[6], items[i])
  else
    if ARGV[2] == '1' then redis.call('HSET', KEYS[5], digest, 1) end
    redis.call('ZADD', KEYS[2], items[i + 1], items[i])
    requeued = requeued + 1
  end
end
if #items > 0 and ARGV[2] == '1' then redis.call('EXPIRE', KEYS[5], ARGV[1]) end
redis.call('DEL', KEYS[1])
if requeued > 0 then redis.call('LPUSH', KEYS[4], 1) end
return #items / 2
"""
COMPUTING_TTL_S = 600  # a computing key outlives any batch; it is only read at its worker's death


class LeasedPulls:
    """The leased-pull and liveness operations of HostingChannelLayer (a mixin).

    Uses the layer's prefix, expiry, connection(), deserialize(), _key(), _index() and doorbell_key().
    """

    _pull_script = LuaScript(_PULL)
    _requeue_script = LuaScript(_REQUEUE)

    def inflight_key(self, channel: str, worker_id: str) -> str:
        """The messages a worker holds (popped but not yet answered)."""
        return f"{self.prefix}{channel}:inflight:{worker_id}"

    def alive_key(self, worker_id: str) -> str:
        """Exists while the worker lives (refreshed by it, expires after its death)."""
        return f"{self.prefix}worker:alive:{worker_id}"

    @property
    def workers_key(self) -> str:
        """Set of worker ids that may hold in-flight messages."""
        return f"{self.prefix}workers"

    @property
    def redelivered_key(self) -> str:
        """Hash of the digests of messages that were in flight at a worker death."""
        return f"{self.prefix}redelivered"

    def computing_key(self, worker_id: str) -> str:
        """The digest of the redelivered message a worker computes alone now."""
        return f"{self.prefix}worker:computing:{worker_id}"

    @property
    def poison_key(self) -> str:
        """List of poison messages (computing alone at a second worker death), to answer 500 and drop."""
        return f"{self.prefix}poison"

    async def take_poison(self, max_count: int = 100) -> list[dict[str, Any]]:
        """Pop quarantined messages (each is taken by one worker only)."""
        messages: list[dict[str, Any]] = []
        for index in range(self.ring_size):  # the requeue script runs on each channel's own server
            popped = await self.connection(index).lpop(self.poison_key, max_count)
            messages.extend(self.deserialize(raw) for raw in popped or [])
        return messages

    def worker_channels_key(self, worker_id: str) -> str:
        """Set of work channels a worker has pulled from."""
        return f"{self.prefix}worker:channels:{worker_id}"

    async def pull(self, channel: str, worker_id: str, max_count: int) -> list[tuple[bytes, dict[str, Any]]]:
        """Pop up to max_count messages and lease them to worker_id, atomically."""
        conn = self.connection(self._index(channel))
        popped = await self._pull_script(
            conn, [self._key(channel), self.inflight_key(channel, worker_id), self.worker_channels_key(worker_id),
                   self.redelivered_key, self.doorbell_key(channel)],
            [max_count, repr(time.time()), int(self.expiry), channel],
        )
        pulled = []
        for i in range(0, len(popped), 2):
            message = self.deserialize(popped[i])
            if int(popped[i + 1]):
                messages.mark_redelivered(message)  # in flight at a worker death: to be computed alone
            pulled.append((popped[i], message))
        return pulled

    async def mark_computing(self, channel: str, worker_id: str, member: bytes | None) -> None:
        """Name the leased message this worker computes alone now (None: none), for the requeue at its death."""
        conn = self.connection(self._index(channel))
        key = self.computing_key(worker_id)
        if member is None:
            await conn.delete(key)
        else:
            await conn.set(key, hashlib.sha1(member).hexdigest(), ex=COMPUTING_TTL_S)

    async def wait_for_work(self, channels: list[str], timeout_s: float) -> None:
        """Block until a sender rings one of these channels' doorbells, or timeout_s passes."""
        if not channels:
            await asyncio.sleep(timeout_s)
            return
        conn = self.connection(self._index(channels[0]))
        await conn.blpop([self.doorbell_key(c) for c in channels], timeout=timeout_s)

    async def release(self, channel: str, worker_id: str, members: list[bytes]) -> None:
        """Forget leased messages once they are answered."""
        if members:
            conn = self.connection(self._index(channel))
            await conn.zrem(self.inflight_key(channel, worker_id), *members)

    async def announce(self, worker_id: str, ttl_s: float) -> None:
        """Say this worker is alive for ttl_s more seconds."""
        conn = self.connection(0)
        async with conn.pipeline(transaction=False) as pipe:
            pipe.sadd(self.workers_key, worker_id)
            pipe.set(self.alive_key(worker_id), "1", px=int(ttl_s * 1000))
            await pipe.execute()

    async def retire(self, worker_id: str) -> int:
        """A clean exit: give back what this worker still holds, then forget it."""
        await self.connection(0).delete(self.alive_key(worker_id))
        return max(await self.requeue_if_dead(worker_id, died=False), 0)

    async def requeue_if_dead(self, worker_id: str, died: bool = True) -> int:
        """Put a dead worker's leased messages back on their channels; -1 if it is alive.

        died: mark each message as in flight at a death (and quarantine the one it computed alone).
        """
        conn = self.connection(0)
        moved = 0
        for raw in await conn.smembers(self.worker_channels_key(worker_id)):
            channel = raw.decode() if isinstance(raw, bytes) else str(raw)
            count = int(await self._requeue_script(
                self.connection(self._index(channel)),
                [self.inflight_key(channel, worker_id), self._key(channel), self.alive_key(worker_id),
                 self.doorbell_key(channel), self.redelivered_key, self.poison_key, self.computing_key(worker_id)],
                [max(int(self.expiry) * 10, 600), "1" if died else "0"],
            ))
            if count < 0:
                return -1
            moved += count
        if await conn.exists(self.alive_key(worker_id)):
            return -1
        await conn.delete(self.worker_channels_key(worker_id))
        await conn.srem(self.workers_key, worker_id)
        return moved

    async def recover_dead_workers(self, own_id: str) -> int:
        """Requeue the messages of every registered worker whose liveness key expired."""
        conn = self.connection(0)
        moved = 0
        for raw in await conn.smembers(self.workers_key):
            worker_id = raw.decode() if isinstance(raw, bytes) else str(raw)
            if worker_id != own_id:
                moved += max(0, await self.requeue_if_dead(worker_id))
        return moved
