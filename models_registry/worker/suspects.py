"""Requests redelivered after a worker death are computed alone, each named in Redis first.

A message that was in flight when a worker died may be what killed it. Its next worker
runs it in a batch of its own after naming it as computing (broker.message_leases): if that
worker dies too, the requeue quarantines that message alone as poison, never the
requests that happened to be leased or batched beside it. `parts` says how a batch is
computed; the batch loop computes each part (naming its lease around it) and puts the
outputs back at their positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from models_registry.core.batch_types import Batch, Item
from models_registry.worker.delivery import Delivery, Lease


@dataclass(frozen=True)
class Part:
    """One compute of a batch: its items (at positions of the batch), their sinks, and the lease to name first."""

    batch: Batch[Delivery]
    sinks: list[Any]
    positions: list[int]
    named: Lease | None = None  # a redelivered item's lease: named computing around this part (None: none)


def _suspect_lease(item: Item[Delivery]) -> Lease | None:
    """The lease of a redelivered item (the one to name as computing); None for the others."""
    delivery = item.request.delivery
    return delivery.lease if delivery.suspect else None


def parts(batch: Batch[Delivery], sinks: list[Any]) -> list[Part]:
    """The computes of batch in order: each suspect item alone, named first, then the rest together."""
    suspects = {position: lease for position, item in enumerate(batch.items)
                if (lease := _suspect_lease(item)) is not None}
    if not suspects:
        return [Part(batch, sinks, list(range(len(batch.items))))]
    alone = [Part(Batch(batch.key, [batch.items[position]], "isolated"), [sinks[position]], [position], lease)
             for position, lease in suspects.items()]
    rest = [position for position in range(len(batch.items)) if position not in suspects]
    if not rest:
        return alone
    together = Part(Batch(batch.key, [batch.items[p] for p in rest], batch.reason), [sinks[p] for p in rest], rest)
    return [*alone, together]
