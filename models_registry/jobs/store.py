"""What the Files and Batches routes read and write (sync ORM; callers hop to a thread)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from models_registry.core.errors import Conflict, InvalidInput, NotFound
from models_registry.jobs import files, retention
from models_registry.jobs.files import new_id
from models_registry.jobs.shapes import batch_object, file_object
from models_registry.models import BatchFile, BatchJob

WINDOWS = {"24h": timedelta(hours=24)}
FINAL = ("completed", "failed", "expired", "cancelled")


def _visible(queryset: QuerySet[Any], owner_id: int | None) -> QuerySet[Any]:
    """Rows of owner_id's token; every row when tokens are off (owner_id None)."""
    return queryset if owner_id is None else queryset.filter(owner_id=owner_id)


def _files() -> QuerySet[BatchFile]:
    return BatchFile.objects.filter(retention.live())


def get_file(public_id: str, owner_id: int | None) -> BatchFile:
    """A live file the token may see, or 404 (another token's, a deleted or an expired file neither)."""
    found = _visible(_files(), owner_id).filter(public_id=public_id).first()
    if found is None:
        raise NotFound(f"no file {public_id!r}")
    return found


def file_json(public_id: str, owner_id: int | None) -> dict[str, Any]:
    """One file as the API shows it."""
    return file_object(get_file(public_id, owner_id))


def _page(queryset: QuerySet[Any], after: str | None, limit: int) -> tuple[list[Any], bool]:
    if after:
        anchor = queryset.filter(public_id=after).values_list("id", flat=True).first()
        if anchor is None:
            raise InvalidInput(f"'after' names no object of this list: {after!r}")
        queryset = queryset.filter(id__lt=anchor)
    rows = list(queryset.order_by("-id")[: limit + 1])
    return rows[:limit], len(rows) > limit


def list_files(owner_id: int | None, after: str | None, limit: int, purpose: str | None) -> tuple[list[dict[str, Any]], bool]:
    """A page of the token's files, newest first."""
    queryset = _visible(_files(), owner_id)
    if purpose:
        queryset = queryset.filter(purpose=purpose)
    rows, more = _page(queryset, after, limit)
    return [file_object(f) for f in rows], more


def _job_json(job: BatchJob) -> dict[str, Any]:
    return batch_object(
        job, job.input_file.public_id,
        job.output_file.public_id if job.output_file else None,
        job.error_file.public_id if job.error_file else None,
    )


def _jobs() -> QuerySet[BatchJob]:
    return BatchJob.objects.select_related("input_file", "output_file", "error_file")


def get_job_json(public_id: str, owner_id: int | None) -> dict[str, Any]:
    """One batch as the API shows it, or 404."""
    job = _visible(_jobs(), owner_id).filter(public_id=public_id).first()
    if job is None:
        raise NotFound(f"no batch {public_id!r}")
    return _job_json(job)


def list_jobs(owner_id: int | None, after: str | None, limit: int) -> tuple[list[dict[str, Any]], bool]:
    """A page of the token's batches, newest first."""
    rows, more = _page(_visible(_jobs(), owner_id), after, limit)
    return [_job_json(j) for j in rows], more


def delete_file(public_id: str, owner_id: int | None) -> dict[str, Any]:
    """Delete the token's file (OpenAI's deletion object); 409 while a running batch reads it."""
    batch_file = get_file(public_id, owner_id)
    batch_id = retention.in_use(batch_file)
    if batch_id is not None:
        raise Conflict(f"file {public_id!r} is the input of batch {batch_id!r}, which is still running; cancel the "
                       "batch (or wait for it to end), then delete the file")
    files.remove(batch_file)
    return {"id": public_id, "object": "file", "deleted": True}


def create_job(owner_id: int | None, input_file_id: str, endpoint: str, window: str,
               metadata: dict[str, str] | None, output_ttl_s: int | None = None) -> dict[str, Any]:
    """A new batch over a checked input file; the workers pick it up within a second."""
    source = get_file(input_file_id, owner_id)
    if source.purpose != "batch":
        raise InvalidInput(f"file {input_file_id!r} is a {source.purpose} file; upload the input with purpose 'batch'")
    if source.urls != [endpoint]:
        calls = ", ".join(source.urls) or "nothing"
        raise InvalidInput(f"the lines of {input_file_id!r} call {calls}; a batch runs one endpoint, so every line's "
                           f"url must be the batch's endpoint {endpoint!r}")
    now = timezone.now()
    job = BatchJob.objects.create(
        public_id=new_id("batch_"), owner_id=owner_id, input_file=source, endpoint=endpoint,
        completion_window=window, metadata=metadata, total=source.lines, expires_at=now + WINDOWS[window],
        output_ttl_s=output_ttl_s,
    )
    return _job_json(_jobs().get(pk=job.pk))


def cancel_job(public_id: str, owner_id: int | None) -> dict[str, Any]:
    """Ask a batch to stop: cancelling now, cancelled once the driver has closed its files."""
    with transaction.atomic():
        job = _visible(BatchJob.objects.select_for_update(), owner_id).filter(public_id=public_id).first()
        if job is None:
            raise NotFound(f"no batch {public_id!r}")
        if job.status in FINAL:
            raise InvalidInput(f"batch {public_id!r} is already {job.status}; only a running batch can be cancelled")
        if job.status in ("validating", "in_progress"):  # finalizing: every line is answered already
            job.status, job.cancelling_at = "cancelling", timezone.now()
            job.save(update_fields=["status", "cancelling_at"])
    return _job_json(_jobs().get(pk=job.pk))
