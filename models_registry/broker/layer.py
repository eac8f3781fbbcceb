"""The channel layer: channels_redis with one-round-trip sends, leased pulls of several channels at once, and replies.

channels_redis spends four Redis round trips on a send and four on a receive, and its
receive of a shared channel can hand one message to two workers (its backup queue is
shared by every receiver). For the `inference` channels this layer instead lets a
worker pop up to N messages from the channels of every model it has ready and record
them in its own in-flight sets in ONE atomic script: a worker killed with SIGKILL leaves
its messages there, and any live worker puts them back on their channels once the dead
one's liveness key has expired (broker.message_leases). Nothing is lost, and no message
is ever handed to two live workers.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable
from typing import Any

from channels.exceptions import ChannelFull
from channels_redis.core import RedisChannelLayer

from models_registry.broker import enqueue, messages
from models_registry.broker.command_packing import HiredisPools
from models_registry.broker.lua import LuaScript
from models_registry.broker.message_leases import MessageLeases
from models_registry.broker.work_layer import Pulled

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

# KEYS: the worker's set of channels, the redelivered hash, then per channel: its queue, this worker's in-flight
# set of it, its doorbell. ARGV: how many to take, now, expiry, then the channels' names. The channels are
# emptied in order until that many are taken. Returns [channel's position, message, flag, ...]: flag 1 for a
# message that was in flight at a worker death (its hash is in KEYS[2]; the worker computes it alone), else 0.
# An emptied channel also silences its doorbell: the rings of messages this pull took would only wake the
# worker for pulls that find nothing (one per message sent, under load).
_PULL = """
local room, now, expiry = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local struck = redis.call('EXISTS', KEYS[2]) == 1
local taken = {}
for c = 1, (#KEYS - 2) / 3 do
  if room <= 0 then break end
  local queue, inflight = KEYS[3 * c], KEYS[3 * c + 1]
  redis.call('ZREMRANGEBYSCORE', queue, 0, now - expiry)
  local popped = redis.call('ZPOPMIN', queue, room)
  if #popped > 0 then
    for i = 1, #popped, 2 do
      redis.call('ZADD', inflight, popped[i + 1], popped[i])
      local flag = (struck and redis.call('HEXISTS', KEYS[2], redis.sha1hex(popped[i])) == 1) and 1 or 0
      taken[#taken + 1] = c
      taken[#taken + 1] = popped[i]
      taken[#taken + 1] = flag
    end
    redis.call('SADD', KEYS[1], ARGV[3 + c])
    room = room - #popped / 2
  end
  if redis.call('ZCARD', queue) == 0 then redis.call('DEL', KEYS[3 * c + 2]) end
end
return taken
"""


class HostingChannelLayer(MessageLeases, HiredisPools, RedisChannelLayer):
    """RedisChannelLayer with one-round-trip sends, leased pulls, a reply pump, leases and liveness (MessageLeases)."""

    _send_script = LuaScript(_SEND)
    _pull_script = LuaScript(_PULL)

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

    async def enqueue(self, channel: str, message: dict[str, Any], admission: enqueue.QueuePlaces,
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

    # --- pulling work ---------------------------------------------------------------------
    async def pull(self, channels: list[str], worker_id: str, max_count: int) -> list[Pulled]:
        """Pop up to max_count messages from channels, in their order, and lease them to worker_id, atomically.

        One script per run of channels on one server: one round trip on a single Redis, however many
        models the worker has ready. Every key is named first; then the scripts run back to back.
        """
        inflight = [self.inflight_key(channel, worker_id) for channel in channels]
        shared = [self.worker_channels_key(worker_id), self.redelivered_key]
        runs: list[tuple[int, list[int], list[str]]] = []  # (server, positions in channels, the script's keys)
        for position, channel in enumerate(channels):
            index = self._index(channel)
            if not runs or runs[-1][0] != index:
                runs.append((index, [], list(shared)))
            runs[-1][1].append(position)
            runs[-1][2].extend((self._key(channel), inflight[position], self.doorbell_key(channel)))
        now = repr(time.time())
        pulled: list[Pulled] = []
        for index, positions, keys in runs:
            room = max_count - len(pulled)
            if room <= 0:
                break
            taken = await self._pull_script(self.connection(index), keys,
                                            [room, now, int(self.expiry), *(channels[p] for p in positions)])
            for i in range(0, len(taken), 3):
                member = taken[i + 1]
                pulled.append(Pulled((channels[positions[int(taken[i]) - 1]], member), self.deserialize(member),
                                     bool(int(taken[i + 2]))))
        return pulled

    async def wait_for_work(self, channels: list[str], timeout_s: float) -> None:
        """Block until a sender rings one of these channels' doorbells, or timeout_s passes."""
        if not channels:
            await asyncio.sleep(timeout_s)
            return
        by_server: dict[int, list[str]] = {}
        for channel in channels:
            by_server.setdefault(self._index(channel), []).append(self.doorbell_key(channel))
        # Each server's doorbells at once (a ring's too): the first ring wakes the worker, the other waits are
        # cancelled (a ring one of them took meanwhile is not lost: the next pull takes every waiting message).
        waits = [asyncio.ensure_future(self.connection(index).blpop(doorbells, timeout=timeout_s))
                 for index, doorbells in by_server.items()]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

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
            # In a context of its own: the pump serves every request, so it is not the first one's (its Redis
            # calls would otherwise nest under that request's span for the life of the process).
            self._pump = asyncio.get_running_loop().create_task(self._pump_replies(), context=contextvars.Context())

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
