"""Deleting expired files (inputs, outputs, error files) and stored responses: the job drivers sweep on their loop.

A file past its expires_at is hidden from the API at once and deleted by the next sweep
of any worker's driver (every SWEEP_EVERY_S), unless a running batch still reads it: an
input is deleted after its batch ends.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime

from asgiref.sync import sync_to_async
from django.db.models import Q
from django.utils import timezone

from models_registry.jobs import files, response_store
from models_registry.models import BatchFile, BatchJob
from models_registry.catalog.lookups import fresh_connection

logger = logging.getLogger(__name__)

SWEEP_EVERY_S = 60.0
SWEEP_BATCH = 500  # files deleted per sweep at most; the next sweep goes on

_last_sweep = float("-inf")


def live(now: datetime | None = None) -> Q:
    """The files the API shows: not deleted and not expired."""
    now = now or timezone.now()
    return Q(deleted_at__isnull=True) & (Q(expires_at__isnull=True) | Q(expires_at__gt=now))


def in_use(batch_file: BatchFile) -> str | None:
    """The id of an active batch reading batch_file, if any."""
    return BatchJob.objects.filter(input_file=batch_file, status__in=BatchJob.ACTIVE).values_list(
        "public_id", flat=True).first()


def sweep(now: datetime | None = None) -> int:
    """Delete expired files that no active batch reads, and expired stored responses; how many were deleted."""
    now = now or timezone.now()
    expired = (BatchFile.objects.filter(deleted_at__isnull=True, expires_at__lte=now)
               .exclude(jobs__status__in=BatchJob.ACTIVE).order_by("expires_at")[:SWEEP_BATCH])
    count = 0
    for batch_file in expired:
        files.remove(batch_file)
        count += 1
    if count:
        logger.info("deleted %d expired batch file(s)", count)
    return count + response_store.sweep(now)


async def maybe_sweep() -> None:
    """Sweep when the last sweep of this process is SWEEP_EVERY_S old (errors are logged, not raised)."""
    global _last_sweep
    if time.monotonic() - _last_sweep < SWEEP_EVERY_S:
        return
    _last_sweep = time.monotonic()
    try:
        # Deleting many stored files takes a while: not on the thread the leases' queries use.
        await sync_to_async(fresh_connection(sweep), thread_sensitive=False)()
    except Exception:
        logger.exception("sweeping expired batch files failed; trying again in %.0f s", SWEEP_EVERY_S)


def reset() -> None:
    """Sweep on the next loop (tests)."""
    global _last_sweep
    _last_sweep = float("-inf")
