"""Requests redelivered after a worker death are computed alone, each named in Redis first.

A message that was in flight when a worker died may be what killed it. Its next worker
runs it in a batch of its own after naming it as computing (broker.message_leases): if that
worker dies too, the requeue quarantines that message alone as poison, never the
requests that happened to be leased or batched beside it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from models_registry.core.batch_types import Batch, Item
from models_registry.worker.delivery import Delivery, Lease

logger = logging.getLogger(__name__)

RunPart = Callable[[Batch[Delivery], list[Any]], Awaitable[list[Any]]]
Mark = Callable[[str, bytes | None], Awaitable[None]]  # (channel, leased message or None)


def _suspect_lease(item: Item[Delivery]) -> Lease | None:
    """The lease of a redelivered item (the one to name as computing); None for the others."""
    delivery = item.request.delivery
    return delivery.lease if delivery.suspect else None


async def run_isolating(batch: Batch[Delivery], sinks: list[Any], run: RunPart, mark: Mark) -> list[Any]:
    """Outputs for batch in item order: suspect items one at a time, each named first, then the rest together."""
    suspects = {position: lease for position, item in enumerate(batch.items)
                if (lease := _suspect_lease(item)) is not None}
    if not suspects:
        return await run(batch, sinks)
    outputs: list[Any] = [None] * len(batch.items)
    for position, (channel, member) in suspects.items():
        try:
            await mark(channel, member)
        except Exception as error:  # broker away: nothing could be requeued either, compute anyway
            logger.warning("could not name the redelivered request computing now: %s", error)
        [outputs[position]] = await run(Batch(batch.key, [batch.items[position]], "isolated"), [sinks[position]])
        try:
            await mark(channel, None)
        except Exception:
            pass  # a stale name is harmless: that message is answered and released
    rest = [position for position in range(len(batch.items)) if position not in suspects]
    if rest:
        part = Batch(batch.key, [batch.items[p] for p in rest], batch.reason)
        for position, output in zip(rest, await run(part, [sinks[p] for p in rest])):
            outputs[position] = output
    return outputs
