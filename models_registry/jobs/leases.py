"""The job rows as the driver changes them (sync ORM): claims, progress commits, the end.

Every write is conditional on the lease (and, for progress, on the chunk it follows), so
two drivers that both believe they hold a job can never both commit the same chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

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
    token_hash: str | None
    input_file: BatchFile


def _claimable(owner: str) -> Q:
    return Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=timezone.now()) | Q(lease_owner=owner)


def claim(owner: str, lease_s: float) -> ClaimedJob | None:
    """Take the oldest active job nobody holds (or whose holder's lease ran out)."""
    active = BatchJob.objects.filter(status__in=BatchJob.ACTIVE)
    for pk in active.filter(_claimable(owner)).order_by("id").values_list("id", flat=True)[:8]:
        taken = active.filter(_claimable(owner), pk=pk).update(
            lease_owner=owner, lease_expires_at=timezone.now() + timedelta(seconds=lease_s))
        if taken:
            job = BatchJob.objects.select_related("owner", "input_file").get(pk=pk)
            return ClaimedJob(
                pk=job.pk, public_id=job.public_id, status=job.status,
                progress=Progress(job.next_chunk, job.next_line, job.next_offset, job.completed, job.failed),
                token_hash=job.owner.token_hash if job.owner else None, input_file=job.input_file,
            )
    return None


def renew(pk: int, owner: str, lease_s: float) -> str | None:
    """Extend the lease; the job's status now ("expiring" once its window is over), or None when lost."""
    now = timezone.now()
    held = BatchJob.objects.filter(pk=pk, lease_owner=owner).update(lease_expires_at=now + timedelta(seconds=lease_s))
    if not held:
        return None
    status, expires_at = BatchJob.objects.filter(pk=pk).values_list("status", "expires_at").get()
    if status == "in_progress" and expires_at is not None and expires_at <= now:
        return "expiring"
    return status


def release(pk: int, owner: str) -> None:
    """Let another driver take the job at once (a clean stop)."""
    BatchJob.objects.filter(pk=pk, lease_owner=owner).update(lease_owner="", lease_expires_at=None)


def set_status(pk: int, owner: str, old: tuple[str, ...], new: str) -> bool:
    """Move the job from one of old to new (stamping new's time); False if it was not in old."""
    return bool(BatchJob.objects.filter(pk=pk, lease_owner=owner, status__in=old).update(
        status=new, **{f"{new}_at": timezone.now()}))


def commit_chunk(pk: int, owner: str, progress: Progress, chunk: Chunk, outcome: ChunkOutcome,
                 parts: tuple[str, str]) -> Progress | None:
    """Record a chunk and the progress after it in one transaction; None if the lease was lost."""
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
            failed=len(outcome.errors), output_part=parts[0], error_part=parts[1],
        )
    return after


def finish(pk: int, owner: str, final: str) -> bool:
    """Assemble the output and error files from the committed chunks and close the job.

    Parts (committed or left by attempts that never committed) are removed afterwards.
    """
    job = BatchJob.objects.select_related("owner").get(pk=pk)
    chunks = list(BatchChunk.objects.filter(job_id=pk).order_by("index"))
    output = files.assemble(job.public_id, "output", [c.output_part for c in chunks], job.owner,
                            sum(c.completed for c in chunks))
    errors = files.assemble(job.public_id, "errors", [c.error_part for c in chunks], job.owner,
                            sum(c.failed for c in chunks))
    with transaction.atomic():
        closed = BatchJob.objects.filter(pk=pk, lease_owner=owner, status__in=BatchJob.ACTIVE).update(
            status=final, output_file=output, error_file=errors, lease_owner="", lease_expires_at=None,
            **{f"{final}_at": timezone.now()},
        )
        if not closed:
            transaction.set_rollback(True)
    if not closed:
        files.delete_quietly([f.storage_name for f in (output, errors) if f is not None])
        BatchFile.objects.filter(pk__in=[f.pk for f in (output, errors) if f is not None]).delete()
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
