"""What the hosting code needs from its channel layer, declared once, and the check that the configured one has it.

channels' own layer interface (send, receive, new_channel) is not enough: the views
admit requests and await their replies on futures, and the workers pull leased batches,
send a batch's replies at once, release answered leases and requeue a dead worker's.
HostingChannelLayer (broker/layer.py) implements all of it; a plain channels_redis layer
does not, and is refused at start rather than serving a second, untested way.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any, NamedTuple, Protocol, runtime_checkable

from channels.layers import get_channel_layer
from django.core.exceptions import ImproperlyConfigured
from redis.exceptions import ConnectionError as RedisConnectionError

from models_registry.core.conf import conf


class Pulled(NamedTuple):
    """One message a leased pull took: its lease, the message, and whether it was in flight at a worker death."""

    lease: tuple[str, bytes]  # (channel, the message as this worker's in-flight set holds it): what a release names
    message: dict[str, Any]
    redelivered: bool = False  # in flight at a worker death: computed alone (worker.suspects)


@runtime_checkable
class WorkLayer(Protocol):
    """The channel layer operations of the hand-off, the workers' pulls and their liveness."""

    prefix: str  # every Redis key of this install starts with it (admission and usage keys too)

    def connection(self, index: int) -> Any:
        """The Redis client of server index (admission's sorted sets live on server 0)."""

    # --- the web side: send a request, await its own reply ---------------------------------
    async def new_channel(self, prefix: str = "specific.") -> str:
        """A process-specific channel name for one request's reply."""

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        """Send one message (raises ChannelFull at capacity); a work channel also wakes a worker."""

    async def enqueue(self, channel: str, message: dict[str, Any], admission: Any, plan: Any, *, batch: bool = False,
                      reply: Any = None) -> tuple[int, int]:
        """Charge (plan), admit and send a work message in one round trip: (broker.enqueue status, depth).

        reply: (reply channel, a future or a stream's queue, how to read a reply) to hand the worker's answers to.
        """

    def expect_reply(self, channel: str) -> asyncio.Future[dict[str, Any]]:
        """A future resolved with the next message sent to channel."""

    def forget_reply(self, channel: str) -> None:
        """Stop waiting on channel (answered, timed out or cancelled)."""

    # --- the worker side: leased pulls and batched replies -----------------------------------
    async def pull(self, channels: list[str], worker_id: str, max_count: int) -> list[Pulled]:
        """Pop up to max_count messages from channels, in their order, and lease them to worker_id, atomically."""

    async def wait_for_work(self, channels: list[str], timeout_s: float) -> None:
        """Block until a sender rings one of these channels' doorbells, or timeout_s passes."""

    async def send_replies(self, replies: list[tuple[str, dict[str, Any]]], worker_id: str = "",
                           leases: list[tuple[str, bytes]] = ()) -> int:  # type: ignore[assignment]
        """Send many replies in one round trip per server, releasing worker_id's leases of them too; how many fit."""

    async def release(self, channel: str, worker_id: str, members: list[bytes]) -> None:
        """Forget leased messages once they are answered."""

    # --- liveness: a dead worker's leases go back to their channels -------------------------
    async def announce(self, worker_id: str, ttl_s: float) -> None:
        """Say this worker is alive for ttl_s more seconds."""

    async def retire(self, worker_id: str) -> int:
        """A clean exit: give back what this worker still holds; how many messages."""

    async def recover_dead_workers(self, own_id: str) -> int:
        """Requeue the messages of every worker whose liveness expired; how many."""

    async def mark_computing(self, channel: str, worker_id: str, member: bytes | None) -> None:
        """Name the redelivered message this worker computes alone now (None: none)."""

    async def take_poison(self, max_count: int = 100) -> list[dict[str, Any]]:
        """Pop the messages in flight at two worker deaths (quarantined, never requeued)."""


def require_work_layer(layer: Any) -> WorkLayer:
    """layer itself, once checked to implement WorkLayer; ImproperlyConfigured saying what to set otherwise."""
    if not isinstance(layer, WorkLayer):
        raise ImproperlyConfigured(
            f"CHANNEL_LAYERS['default'] is {type(layer).__module__}.{type(layer).__qualname__}, which lacks the "
            "operations of models_registry.broker.work_layer.WorkLayer (leased pulls, batched replies, liveness); "
            "set its BACKEND to models_registry.broker.layer.HostingChannelLayer"
        )
    return layer


_checked: weakref.WeakSet[Any] = weakref.WeakSet()  # an isinstance check on a Protocol costs ~35 us


def work_layer() -> WorkLayer:
    """The configured channel layer, checked once per layer instance."""
    layer = get_channel_layer()
    if layer not in _checked:
        _checked.add(require_work_layer(layer))
    return layer


def default_layer_config() -> dict[str, Any]:
    """CHANNEL_LAYERS['default'] where the project names none (apps.py sets it): HostingChannelLayer on REDIS_URL."""
    return {
        "BACKEND": "models_registry.broker.layer.HostingChannelLayer",
        "CONFIG": {
            # socket_timeout None: redis-py's 5 s default races channels_redis' 5 s BZPOPMIN.
            # retry_on_error: a pooled connection that a Redis restart closed reconnects and
            # retries its command once, instead of failing the request that drew it.
            "hosts": [{"address": conf.REDIS_URL, "socket_timeout": None, "max_connections": 1000,
                       "retry_on_error": [RedisConnectionError]}],
            # Admission is ours (max_queue_size per task); the layer's cap must never be
            # the thing that refuses an accepted request.
            "capacity": 100_000,
            # Longer than any task's timeout_s, so nothing accepted expires unseen.
            "expiry": 3600,
            # Batch-priority requests queue behind interactive ones sent up to this much later.
            "batch_delay_s": conf.BATCH_AGING_S,
        },
    }
