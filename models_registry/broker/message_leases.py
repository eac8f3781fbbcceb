"""Leases of pulled work messages and worker liveness: the worker side of HostingChannelLayer besides its pulls.

A leased pull (broker.layer) records each message in its worker's in-flight set; the
worker releases it once answered, with its answer (send_replies) or alone. A worker
killed with SIGKILL leaves its messages there, and any live worker puts them back on the
channel once the dead one's liveness key has expired: nothing is lost, and no message is
handed to two live workers.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from redis.exceptions import NoScriptError

from models_registry.broker import messages
from models_registry.broker.admission import Places
from models_registry.broker.lua import LuaScript

# KEYS: the reply channels (n), then the admission sets named by the replies. ARGV: now, expiry, n,
# then per reply: message, capacity, admission set (its index after the n channels; 0: none),
# request id, input count. The request's admission places go in the same script as its answer,
# so a view never sees its places gone before its reply came (views.handoff skips its own leave).
_SEND_REPLIES = """
local now, expiry, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local sent = 0
for i = 1, n do
  local at = 4 + 5 * (i - 1)
  local pending = tonumber(ARGV[at + 2])
  if pending > 0 then
    local members = {}
    for j = 0, tonumber(ARGV[at + 4]) - 1 do
      members[#members + 1] = ARGV[at + 3] .. ':' .. j
      if #members == 1000 then redis.call('ZREM', KEYS[n + pending], unpack(members)); members = {} end
    end
    if #members > 0 then redis.call('ZREM', KEYS[n + pending], unpack(members)) end
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[i], 0, now - expiry)
  if redis.call('ZCARD', KEYS[i]) < tonumber(ARGV[at + 1]) then
    redis.call('ZADD', KEYS[i], now, ARGV[at])
    redis.call('EXPIRE', KEYS[i], expiry)
    sent = sent + 1
  end
end
return sent
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


class MessageLeases:
    """The lease, reply and liveness operations of HostingChannelLayer (a mixin).

    Uses the layer's prefix, expiry, connection(), serialize(), deserialize(), get_capacity(), _key(), _index()
    and doorbell_key().
    """

    _send_replies_script = LuaScript(_SEND_REPLIES)
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
        taken: list[dict[str, Any]] = []
        for index in range(self.ring_size):  # the requeue script runs on each channel's own server
            popped = await self.connection(index).lpop(self.poison_key, max_count)
            taken.extend(self.deserialize(raw) for raw in popped or [])
        return taken

    def worker_channels_key(self, worker_id: str) -> str:
        """Set of work channels a worker has pulled from."""
        return f"{self.prefix}worker:channels:{worker_id}"

    async def mark_computing(self, channel: str, worker_id: str, member: bytes | None) -> None:
        """Name the leased message this worker computes alone now (None: none), for the requeue at its death."""
        conn = self.connection(self._index(channel))
        key = self.computing_key(worker_id)
        if member is None:
            await conn.delete(key)
        else:
            await conn.set(key, hashlib.sha1(member).hexdigest(), ex=COMPUTING_TTL_S)

    async def send_replies(self, replies: list[tuple[str, dict[str, Any]]], worker_id: str = "",
                           leases: list[tuple[str, bytes]] = (),  # type: ignore[assignment]
                           places: list[Places | None] | None = None) -> int:
        """Send many replies (process-specific channels) in one round trip per server; how many fit.

        A worker answers a whole batch at once: one script instead of a send per request, the
        answered messages' leases (channel, member) of worker_id released in the same round trip,
        and (places, one per reply) each request's admission places given back in the script that
        sends its answer; such a reply says `left`, and its view gives nothing back itself.
        """
        by_server: dict[int, tuple[list[str], list[Any], dict[str, int]]] = {}
        for position, (channel, message) in enumerate(replies):
            assert "!" in channel, "send_replies takes process-specific reply channels only"
            index = self._index(channel)
            keys, args, pending_keys = by_server.setdefault(index, ([], [], {}))
            keys.append(self._key(channel))
            place = places[position] if places else None
            if place is not None and index == 0:  # the admission sets live on the first server
                pending = pending_keys.setdefault(place.pending_key, len(pending_keys) + 1)
                message = {**message, messages.PLACES_LEFT: 1}  # its view gives nothing back itself
                leave = [pending, place.request_id, place.count]
            else:
                leave = [0, "", 0]
            args.append([self.serialize({**message, "__asgi_channel__": channel}), self.get_capacity(channel), *leave])
        releases: dict[int, dict[str, list[bytes]]] = {}
        for channel, member in leases:
            releases.setdefault(self._index(channel), {}).setdefault(channel, []).append(member)
        sent = 0
        for index in set(by_server) | set(releases):
            keys, per_reply, pending_keys = by_server.get(index, ([], [], {}))
            script_keys = keys + list(pending_keys)
            script_args = [repr(time.time()), int(self.expiry), len(keys), *(a for reply in per_reply for a in reply)]
            conn = self.connection(index)
            async with conn.pipeline(transaction=False) as pipe:
                if keys:  # the replies first: a lease goes only with (or after) its answer
                    pipe.evalsha(self._send_replies_script.sha, len(script_keys), *script_keys, *script_args)
                for channel, members in releases.get(index, {}).items():
                    pipe.zrem(self.inflight_key(channel, worker_id), *members)
                try:
                    results = await pipe.execute()
                except NoScriptError:  # a restarted Redis: the leases went; load the script with the replies
                    results = [await self._send_replies_script(conn, script_keys, script_args)]
            sent += int(results[0]) if keys else 0
        return sent

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
        channels_key = self.worker_channels_key(worker_id)
        # A pull names its channel in the set on the channel's own server: on a ring, read them all.
        servers = range(self.ring_size)
        pulled_from = {raw for index in servers for raw in await self.connection(index).smembers(channels_key)}
        for raw in sorted(pulled_from):
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
        for index in servers:
            await self.connection(index).delete(channels_key)
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
