"""Stored responses of the Responses API, per token: kept, read, deleted and swept when expired (sync ORM calls).

A response is kept with the conversation it ends (the input items and its output items), so that
previous_response_id can continue it; only its token sees it (another token's id is a 404, as an
unknown one). It expires as a batch file does (HOSTING_FILE_RETENTION_S after its creation; 0: kept),
is hidden at once then, and deleted by the job drivers' next sweep (jobs.retention).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

import orjson
from django.db.models import Q
from django.utils import timezone

from models_registry.core.conf import conf
from models_registry.core.errors import NotFound
from models_registry.models import StoredResponse

logger = logging.getLogger(__name__)

MAX_STORED_BYTES = 4 * 1024 ** 2  # one response with its conversation; a longer one is answered, not kept
SWEEP_BATCH = 500


def save(public_id: str, owner_id: int | None, response: dict[str, Any], conversation: list[dict[str, Any]]) -> bool:
    """Keep a response and its conversation for owner; False (logged) when it is over MAX_STORED_BYTES."""
    size = len(orjson.dumps(response)) + len(orjson.dumps(conversation))
    if size > MAX_STORED_BYTES:
        logger.warning("response %s is %d bytes with its conversation, over %d: not stored", public_id, size,
                       MAX_STORED_BYTES)
        return False
    ttl = conf.FILE_RETENTION_S
    expires = timezone.now() + timedelta(seconds=ttl) if ttl else None
    StoredResponse.objects.create(public_id=public_id, owner_id=owner_id, response=response,
                                  conversation=conversation, expires_at=expires)
    return True


def _live(public_id: str, owner_id: int | None) -> StoredResponse:
    now = timezone.now()
    found = (StoredResponse.objects.filter(public_id=public_id, owner_id=owner_id)
             .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now)).first())
    if found is None:
        raise NotFound(f"no response {public_id!r}: it was never stored, was deleted, expired, or is another "
                       "token's")
    return found


def get_json(public_id: str, owner_id: int | None) -> dict[str, Any]:
    """The stored Response object (404 for an unknown, expired or another token's id)."""
    return _live(public_id, owner_id).response  # type: ignore[no-any-return]


def conversation(public_id: str, owner_id: int | None) -> list[dict[str, Any]]:
    """The items a stored response ends, oldest first, to continue it (404 as get_json)."""
    return _live(public_id, owner_id).conversation  # type: ignore[no-any-return]


def delete(public_id: str, owner_id: int | None) -> dict[str, Any]:
    """Delete a stored response: OpenAI's deletion object (404 as get_json)."""
    _live(public_id, owner_id).delete()
    return {"id": public_id, "object": "response", "deleted": True}


def sweep(now: datetime | None = None) -> int:
    """Delete up to SWEEP_BATCH expired responses; how many were deleted."""
    now = now or timezone.now()
    ids = list(StoredResponse.objects.filter(expires_at__lte=now).order_by("expires_at")
               .values_list("id", flat=True)[:SWEEP_BATCH])
    count, _ = StoredResponse.objects.filter(id__in=ids).delete() if ids else (0, {})
    if count:
        logger.info("deleted %d expired stored response(s)", count)
    return count
