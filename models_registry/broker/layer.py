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
import logging
import time
from collections.abc import Callable
from typing import Any

from channels.exceptions import ChannelFull
from channels_redis.core import RedisChannelLayer
from redis.exceptions import NoScriptError

from models_registry.broker import enqueue, messages
from models_registry.broker.admission import Places
from models_registry.broker.lua import LuaScript
from models_registry.broker.message_leases import LeasedPulls
from models_registry.broker.command_packing import with_hiredis_packing

logger = logging.getLogger(__name__)
REPLY_BATCH = 64
Reader = Callable[[dict[str, Any]], Any]  # how a waiting request reads its reply (broker.messages)

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

class HostingChannelLayer(LeasedPulls, RedisChannelLayer):
    """RedisChannelLayer with one-round-trip sends, batched replies, a reply pump, and leased pulls (LeasedPulls)."""

    _send_script = LuaScript(_SEND)
    _send_replies_script = LuaScript(_SEND_REPLIES)

    def __init__(self, *args: Any, work_prefixes: tuple[str, ...] = ("inference",), batch_delay_s: float = 0.0,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.work_prefixes = tuple(work_prefixes)
        # Work channels pop the lowest score first: a batch-priority message is scored this much
        # later, so it waits behind interactive messages sent up to batch_delay_s after it.
        self.batch_delay_s = batch_delay_s
        # A reply channel's waiter (a future: its one reply; a queue: a stream's every message) and how to read one.
        self._replies: dict[str, tuple[asyncio.Future[Any] | asyncio.Queue[Any], Reader | None]] = {}
        self._pump: asyncio.Task[None] | None = None

    def create_pool(self, index: int) -> Any:
        """channels_redis' pool for server index, its commands packed by hiredis (broker.command_packing)."""
        return with_hiredis_packing(super().create_pool(index))

    def is_work_channel(self, channel: str) -> bool:
        """Shared work channels: `inference` and `inference.<model>`."""
        return any(channel == p or channel.startswith(p + ".") for p in self.work_prefixes)

    # --- keys ---------------------------------------------------------------------------
    def _key(self, channel: str) -> str:
        return self.prefix + (self.non_local_name(channel) if "!" in channel else channel)

    def doorbell_key(self, channel: str) -> str:
        """A list a sender pushes to so an idle worker wakes without polling."""
        return f"{self.prefix}{channel}:doorbell"

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
            if messages.is_batch_priority(message):
                score += self.batch_delay_s
        conn = self.connection(self._index(channel))
        sent = await self._send_script(
            conn, keys, [self.serialize(message), repr(score), int(self.expiry), self.get_capacity(channel)]
        )
        if not sent:
            raise ChannelFull()

    async def enqueue(self, channel: str, message: dict[str, Any], admission: enqueue.Admission,
                      plan: enqueue.ChargePlan | None, *, batch: bool = False,
                      reply: tuple[str, asyncio.Future[Any] | asyncio.Queue[Any], Reader] | None = None,
                      ) -> tuple[int, int]:
        """Charge, admit and send a work message in one round trip (broker.enqueue): (status, depth).

        batch: a batch-priority message (it waits behind interactive ones). reply: (the message's
        reply channel, a future or a stream's queue, how to read a reply): the future is resolved
        with the reply read, and the channel forgotten once it is done or cancelled; the queue
        gets every message read, until forget_reply.
        """
        if reply is not None:
            self._await_on(*reply)
        now = time.time()
        score = now + (self.batch_delay_s if batch else 0.0)
        send = enqueue.Send(self._key(channel), self.doorbell_key(channel), self.serialize(message), score,
                            int(self.expiry), self.get_capacity(channel), now)
        index = self._index(channel)
        if index == 0:
            return await enqueue.run(self.connection(0), plan, admission, send)
        # A sharded ring put the channel on another server than the admission set: two round trips.
        status, depth = await enqueue.run(self.connection(0), plan, admission)
        if status == enqueue.DONE:
            status, _ = await enqueue.run(self.connection(index), None, None, send)
        return status, depth

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
        self._await_on(channel, future, None)
        return future

    def _await_on(self, channel: str, waiter: asyncio.Future[Any] | asyncio.Queue[Any], read: Reader | None) -> None:
        """Hand waiter the messages sent to channel (read, if given): a future the next one (channel forgotten once
        it is done), a queue every one until forget_reply."""
        self._replies[channel] = (waiter, read)
        if isinstance(waiter, asyncio.Future):
            waiter.add_done_callback(lambda _: self._forget_answered(channel, waiter))
        if self._pump is None or self._pump.done():
            self._pump = asyncio.ensure_future(self._pump_replies())

    def _forget_answered(self, channel: str, future: asyncio.Future[Any]) -> None:
        waiter = self._replies.get(channel)
        if waiter is not None and waiter[0] is future:
            del self._replies[channel]

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
            channel = message.pop("__asgi_channel__", "")
            waiter = self._replies.get(channel)
            if waiter is None:
                continue
            target, read = waiter
            if isinstance(target, asyncio.Queue):  # a stream: every message, until forgotten
                try:
                    target.put_nowait(read(message) if read is not None else message)
                except Exception:
                    logger.exception("dropped a stream message it could not read")
                continue
            del self._replies[channel]
            if target.done():
                continue
            try:
                target.set_result(read(message) if read is not None else message)
            except Exception as error:  # noqa: BLE001 - a reply it cannot read fails its request, not the pump
                target.set_exception(error)
