"""Poison messages: a request in flight at two worker deaths is answered 500, recorded, and never computed again.

The broker's requeue script counts the deaths each leased message lived through and puts
a message at its second on the poison list (broker.message_leases); a live worker takes it from
there, answers its client, and records it for the admin and `hosting_poison_requests_total`.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import sync_to_async

from models_registry.broker.messages import WorkRequest
from models_registry.broker.work_layer import WorkLayer
from models_registry.core.errors import Quarantined
from models_registry.catalog.rollout import split_wire
from models_registry.worker.replies import Replies

logger = logging.getLogger(__name__)

POISON_MESSAGE = ("this request was being computed when two workers stopped, so it is not retried again; "
                  "an operator can see it in the admin (quarantined requests)")


def _record(requests: list[WorkRequest]) -> None:
    from models_registry.models import QuarantinedRequest

    QuarantinedRequest.objects.bulk_create([
        # By the model's name, as the admin and /metrics count them (the log line names the version's wire name).
        QuarantinedRequest(request_id=r.id[:64], model=split_wire(r.model)[0][:100], task=r.task[:100],
                           inputs=len(r.inputs),
                           input_bytes=min(len(repr(r.inputs).encode()), 2**31 - 1))
        for r in requests
    ])


async def answer_poison(layer: WorkLayer, replies: Replies) -> int:
    """Take the quarantined messages, answer each 500 and record them; how many there were."""
    messages: list[dict[str, Any]] = await layer.take_poison()
    requests = [r for r in (WorkRequest.from_wire(m) for m in messages) if r is not None]
    for request in requests:
        logger.error("quarantined request %s on %s/%s: in flight at two worker deaths", request.id,
                     request.model, request.task)
        replies.error(request.id, request.reply, Quarantined(POISON_MESSAGE), deadline=request.deadline)
    if requests:
        try:
            await sync_to_async(_record)(requests)
        except Exception:
            logger.exception("could not record %d quarantined request(s)", len(requests))
    return len(messages)
