"""The job rows as the driver changes them (sync ORM): claims, progress commits, the end.

Every write is conditional on the lease (and, for progress, on the chunk it follows), so
two drivers that both believe they hold a job can never both commit the same chunk.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from models_registry.core.conf import conf
from models_registry.jobs import files
from models_registry.jobs.chunks import Chunk, ChunkOutcome, Progress, advance
from models_registry.models import BatchChunk, BatchFile, BatchJob


@dataclass(frozen=True)
class ClaimedJob:
    """What a driver needs of a job it holds."""

    pk: int
    public_id: str
    status: str
    progress: Progress
    owner_id: int | None  # the token record the lines run as (not its secret: rotation keeps the job going)
    input_file: BatchFile
    expires_at: datetime | None = None  # the end of its completion window

    def fits_window(self, wait_s: float) -> bool:
        """Whether a retry wait_s from now still falls inside the job's completion window."""
        return self.expires_at is None or timezone.now() + timedelta(seconds=wait_s) < self.expires_at


def _claimable(owner: str) -> Q:
    return Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=timezone.now()) | Q(lease_owner=owner)


def claim(owner: str, lease_s: float, busy_owners: Collection[int | None] = ()) -> ClaimedJob | None:
    """Take the oldest active job nobody holds (or whose holder's lease ran out).

    busy_owners: tokens this driver runs a job of already; their other jobs wait, so that
    a driver's jobs belong to different owners (one owner's queue of jobs never fills it).
    """
    active = BatchJob.objects.filter(status__in=BatchJob.ACTIVE)
    candidates = active.filter(_claimable(owner))
    ids = [o for o in busy_owners if o is not None]
    if ids:
        candidates = candidates.exclude(owner_id__in=ids)
    if None in busy_owners:
        candidates = candidates.exclude(owner__isnull=True)
    for pk in candidates.order_by("id").values_list("id", flat=True)[:8]:
        taken = active.filter(_claimable(owner), pk=pk).update(
            lease_owner=owner, lease_expires_at=timezone.now() + timedelta(seconds=lease_s))
        if taken:
            job = BatchJob.objects.select_related("owner", "input_file").get(pk=pk)
            return ClaimedJob(
                pk=job.pk, public_id=job.public_id, status=job.status,
                progress=Progress(job.next_chunk, job.next_line, job.next_offset, job.completed, job.failed),
                owner_id=job.owner_id, input_file=job.input_file, expires_at=job.expires_at,
            )
    return None


def renew(pk: int, owner: str, lease_s: float) -> str | None:
    """Extend the lease; the job's status now, or None when lost.

    "expiring" once its window is over; "revoking" once its owner's token is revoked,
    expired or deleted (a rotated token is the same record, and the job goes on).
    """
    now = timezone.now()
    held = BatchJob.objects.filter(pk=pk, lease_owner=owner).update(lease_expires_at=now + timedelta(seconds=lease_s))
    if not held:
        return None
    status, expires_at, owner_id, revoked, token_expires = BatchJob.objects.filter(pk=pk).values_list(
        "status", "expires_at", "owner_id", "owner__revoked", "owner__expires_at").get()
    if status == "in_progress" and conf.REQUIRE_API_TOKEN and (
            owner_id is None or revoked or (token_expires is not None and token_expires <= now)):
        return "revoking"
    if status == "in_progress" and expires_at is not None and expires_at <= now:
        return "expiring"
    return status


REVOKED_ERROR = {"code": "token_revoked", "message": "the API token that created this batch was revoked, expired or "
                 "deleted; the requests not yet run are in the error file", "line": None, "param": None}


def stop_revoked(pk: int, owner: str) -> bool:
    """Move a running job whose owner's token is gone to cancelling, saying why in its errors."""
    return bool(BatchJob.objects.filter(pk=pk, lease_owner=owner, status__in=("validating", "in_progress")).update(
        status="cancelling", cancelling_at=timezone.now(), errors=[REVOKED_ERROR]))


def release(pk: int, owner: str) -> None:
    """Let another driver take the job at once (a clean stop)."""
    BatchJob.objects.filter(pk=pk, lease_owner=owner).update(lease_owner="", lease_expires_at=None)


def set_status(pk: int, owner: str, old: tuple[str, ...], new: str) -> bool:
    """Move the job from one of old to new (stamping new's time); False if it was not in old."""
    return bool(BatchJob.objects.filter(pk=pk, lease_owner=owner, status__in=old).update(
        status=new, **{f"{new}_at": timezone.now()}))


def commit_chunk(pk: int, owner: str, progress: Progress, chunk: Chunk, outcome: ChunkOutcome,
                 parts: tuple[str, str], size: int = 0) -> Progress | None:
    """Record a chunk (its parts, of size bytes) and the progress after it in one transaction; None if the lease
    was lost."""
    after = advance(progress, chunk, outcome)
    with transaction.atomic():
        moved = BatchJob.objects.filter(
            pk=pk, lease_owner=owner, next_chunk=chunk.index, next_offset=chunk.start,
        ).update(
            next_chunk=after.next_chunk, next_line=after.next_line, next_offset=after.next_offset,
            completed=F("completed") + len(outcome.output), failed=F("failed") + len(outcome.errors),
        )
        if moved != 1:
            return None
        BatchChunk.objects.create(
            job_id=pk, index=chunk.index, first_line=chunk.first_line, next_line=chunk.next_line,
            start_offset=chunk.start, end_offset=chunk.end, completed=len(outcome.output),
            failed=len(outcome.errors), output_part=parts[0], error_part=parts[1], bytes=size,
        )
    return after


def finish(pk: int, owner: str, final: str, errors: list[dict[str, Any]] | None = None) -> bool:
    """Assemble the output and error files from the committed chunks and close the job (errors: added to its own).

    Parts (committed or left by attempts that never committed) are removed afterwards.
    """
    job = BatchJob.objects.select_related("owner").get(pk=pk)
    chunks = list(BatchChunk.objects.filter(job_id=pk).order_by("index"))
    output = files.assemble(job.public_id, "output", [c.output_part for c in chunks], job.owner,
                            sum(c.completed for c in chunks), job.output_ttl_s)
    error_file = files.assemble(job.public_id, "errors", [c.error_part for c in chunks], job.owner,
                                sum(c.failed for c in chunks), job.output_ttl_s)
    with transaction.atomic():
        closed = BatchJob.objects.filter(pk=pk, lease_owner=owner, status__in=BatchJob.ACTIVE).update(
            status=final, output_file=output, error_file=error_file, lease_owner="", lease_expires_at=None,
            **{f"{final}_at": timezone.now()}, **({"errors": (job.errors or []) + errors} if errors else {}),
        )
        if not closed:
            transaction.set_rollback(True)
    if not closed:
        files.delete_quietly([f.storage_name for f in (output, error_file) if f is not None])
        BatchFile.objects.filter(pk__in=[f.pk for f in (output, error_file) if f is not None]).delete()
        return False
    files.delete_quietly(files.leftover_parts(job.public_id))
    return True


def fail(pk: int, owner: str, code: str, message: str) -> None:
    """End a job that cannot run at all (e.g. its input file is gone)."""
    BatchJob.objects.filter(pk=pk, lease_owner=owner, status__in=BatchJob.ACTIVE).update(
        status="failed", failed_at=timezone.now(), errors=[{"code": code, "message": message, "line": None,
                                                            "param": None}],
        lease_owner="", lease_expires_at=None,
    )
