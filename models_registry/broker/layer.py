"""The channel layer: channels_redis with one-round-trip sends and leased, batched pulls.

channels_redis spends four Redis round trips on a send and four on a receive, and its
receive of a shared channel can hand one message to two workers (its backup queue is
shared by every receiver). For the `inference` channel this layer instead lets a
worker pop up to N messages and record them in its own in-flight set in ONE atomic
script: a worker killed with SIGKILL leaves its messages there, and any live worker
puts them back on the channel once the dead one's liveness key has expired. Nothing is
lost, and no message is ever handed to two live workers.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from typing import Any

from channels.exceptions import ChannelFull
from channels_redis.core import RedisChannelLayer
from redis.exceptions import NoScriptError

logger = logging.getLogger(__name__)
REPLY_BATCH = 64

_SEND = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, tonumber(ARGV[2]) - tonumber(ARGV[3]))
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
if KEYS[2] then
  redis.call('LPUSH', KEYS[2], 1)
  redis.call('LTRIM', KEYS[2], 0, 63)
  redis.call('EXPIRE', KEYS[2], ARGV[3])
end
return 1
"""

_SEND_REPLIES = """
local now, expiry = tonumber(ARGV[1]), tonumber(ARGV[2])
local sent = 0
for i = 1, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], 0, now - expiry)
  if redis.call('ZCARD', KEYS[i]) < tonumber(ARGV[2 + 2 * i]) then
    redis.call('ZADD', KEYS[i], now, ARGV[1 + 2 * i])
    redis.call('EXPIRE', KEYS[i], expiry)
    sent = sent + 1
  end
end
return sent
"""

_PULL = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, tonumber(ARGV[2]) - tonumber(ARGV[3]))
local popped = redis.call('ZPOPMIN', KEYS[1], ARGV[1])
if #popped > 0 then
  for i = 1, #popped, 2 do redis.call('ZADD', KEYS[2], popped[i + 1], popped[i]) end
  redis.call('SADD', KEYS[3], ARGV[4])
end
return popped
"""

_REQUEUE = """
if redis.call('EXISTS', KEYS[3]) == 1 then return -1 end
local items = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #items, 2 do redis.call('ZADD', KEYS[2], items[i + 1], items[i]) end
redis.call('DEL', KEYS[1])
if #items > 0 then redis.call('LPUSH', KEYS[4], 1) end
return #items / 2
"""


class LuaScript:
    """A Lua script run by EVALSHA, loaded on first use on each server."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    async def __call__(self, conn: Any, keys: list[Any], args: list[Any]) -> Any:
        try:
            return await conn.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await conn.eval(self.source, len(keys), *keys, *args)


class HostingChannelLayer(RedisChannelLayer):
    """RedisChannelLayer plus leased pulls for shared work channels."""

    _send_script = LuaScript(_SEND)
    _send_replies_script = LuaScript(_SEND_REPLIES)
    _pull_script = LuaScript(_PULL)
    _requeue_script = LuaScript(_REQUEUE)

    def __init__(self, *args: Any, work_prefixes: tuple[str, ...] = ("inference",), batch_delay_s: float = 0.0,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.work_prefixes = tuple(work_prefixes)
        # Work channels pop the lowest score first: a batch-priority message is scored this much
        # later, so it waits behind interactive messages sent up to batch_delay_s after it.
        self.batch_delay_s = batch_delay_s
        self._replies: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._pump: asyncio.Task[None] | None = None

    def is_work_channel(self, channel: str) -> bool:
        """Shared work channels: `inference` and `inference.<model>`."""
        return any(channel == p or channel.startswith(p + ".") for p in self.work_prefixes)

    # --- keys ---------------------------------------------------------------------------
    def _key(self, channel: str) -> str:
        return self.prefix + (self.non_local_name(channel) if "!" in channel else channel)

    def doorbell_key(self, channel: str) -> str:
        """A list a sender pushes to so an idle worker wakes without polling."""
        return f"{self.prefix}{channel}:doorbell"

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

    def worker_channels_key(self, worker_id: str) -> str:
        """Set of work channels a worker has pulled from."""
        return f"{self.prefix}worker:channels:{worker_id}"

    def _index(self, channel: str) -> int:
        return self.consistent_hash(self.non_local_name(channel) if "!" in channel else channel)

    # --- sending ------------------------------------------------------------------------
    async def send(self, channel: str, message: dict[str, Any]) -> None:
        """Send in one round trip (expiry, capacity check, add, and wake a worker)."""
        assert isinstance(message, dict), "message is not a dict"
        assert self.require_valid_channel_name(channel), "Channel name not valid"
        assert "__asgi_channel__" not in message
        if "!" in channel:
            message = {**message, "__asgi_channel__": channel}
        keys = [self._key(channel)]
        score = time.time()
        if self.is_work_channel(channel):
            keys.append(self.doorbell_key(channel))
            if message.get("priority") == "batch":
                score += self.batch_delay_s
        conn = self.connection(self._index(channel))
        sent = await self._send_script(
            conn, keys, [self.serialize(message), repr(score), int(self.expiry), self.get_capacity(channel)]
        )
        if not sent:
            raise ChannelFull()

    async def send_replies(self, replies: list[tuple[str, dict[str, Any]]]) -> int:
        """Send many replies (process-specific channels) in one round trip per server; how many fit.

        A worker answers a whole batch at once: one script instead of a send per request.
        """
        by_server: dict[int, tuple[list[str], list[Any]]] = {}
        for channel, message in replies:
            assert "!" in channel, "send_replies takes process-specific reply channels only"
            keys, args = by_server.setdefault(self._index(channel), ([], []))
            keys.append(self._key(channel))
            args += [self.serialize({**message, "__asgi_channel__": channel}), self.get_capacity(channel)]
        sent = 0
        for index, (keys, args) in by_server.items():
            sent += int(await self._send_replies_script(
                self.connection(index), keys, [repr(time.time()), int(self.expiry), *args]))
        return sent

    # --- receiving replies ----------------------------------------------------------------
    async def receive_single(self, channel: str) -> tuple[Any, dict[str, Any]]:
        """Pop one message of a process-specific channel with a plain BZPOPMIN.

        Replies need no backup queue: if this process dies, nobody wants them anyway.
        """
        if "!" in channel:
            conn = self.connection(self._index(channel))
            key = self.prefix + channel
            while True:
                result = await conn.bzpopmin(key, timeout=self.brpop_timeout)
                if result is None:
                    continue
                _, member, _ = result
                message = self.deserialize(member)
                if "__asgi_channel__" in message:
                    target = message.pop("__asgi_channel__")
                    return target, message
                return channel, message
        return await super().receive_single(channel)

    # --- replies: one pump per process, one future per waiting request ----------------
    def expect_reply(self, channel: str) -> asyncio.Future[dict[str, Any]]:
        """A future resolved with the next message sent to channel (one of new_channel()'s).

        A single task pops this process' replies and resolves the futures; a view that
        gives up just drops its future, so a late reply is discarded instead of
        sitting in a buffer forever, and no cancellation can ever lose a reply.
        """
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._replies[channel] = future
        if self._pump is None or self._pump.done():
            self._pump = asyncio.ensure_future(self._pump_replies())
        return future

    def forget_reply(self, channel: str) -> None:
        """Stop waiting on channel (answered, timed out or cancelled)."""
        self._replies.pop(channel, None)

    async def _pump_replies(self) -> None:
        key = self.prefix + f"specific.{self.client_prefix}!"
        conn = self.connection(self.consistent_hash(f"specific.{self.client_prefix}!"))
        while True:
            try:
                first = await conn.bzpopmin(key, timeout=self.brpop_timeout)
                if first is None:
                    continue
                self._deliver([first[1]])  # at once: do not make it wait for the burst below
                more = await conn.zpopmin(key, REPLY_BATCH)  # a burst of replies: one round trip
                self._deliver([member for member, _ in more])
            except asyncio.CancelledError:
                raise
            except Exception as error:  # broker away: waiting views time out or see 503s
                logger.warning("reply pump: %s; retrying", error)
                await asyncio.sleep(0.2)

    def _deliver(self, members: list[bytes]) -> None:
        """Resolve the futures waiting for these replies; drop replies nobody awaits."""
        for member in members:
            try:
                message = self.deserialize(member)
            except Exception:
                logger.exception("dropped an undecodable reply")
                continue
            future = self._replies.pop(message.pop("__asgi_channel__", ""), None)
            if future is not None and not future.done():
                future.set_result(message)

    # --- leased pulls for workers ------------------------------------------------------
    async def pull(self, channel: str, worker_id: str, max_count: int) -> list[tuple[bytes, dict[str, Any]]]:
        """Pop up to max_count messages and lease them to worker_id, atomically."""
        conn = self.connection(self._index(channel))
        popped = await self._pull_script(
            conn, [self._key(channel), self.inflight_key(channel, worker_id), self.worker_channels_key(worker_id)],
            [max_count, repr(time.time()), int(self.expiry), channel],
        )
        return [(popped[i], self.deserialize(popped[i])) for i in range(0, len(popped), 2)]

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
        return max(await self.requeue_if_dead(worker_id), 0)

    async def requeue_if_dead(self, worker_id: str) -> int:
        """Put a dead worker's leased messages back on their channels; -1 if it is alive."""
        conn = self.connection(0)
        moved = 0
        for raw in await conn.smembers(self.worker_channels_key(worker_id)):
            channel = raw.decode() if isinstance(raw, bytes) else str(raw)
            count = int(await self._requeue_script(
                self.connection(self._index(channel)),
                [self.inflight_key(channel, worker_id), self._key(channel), self.alive_key(worker_id),
                 self.doorbell_key(channel)],
                [],
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
