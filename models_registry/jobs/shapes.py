"""OpenAI's JSON shapes for files, batches and lists (what the openai SDK parses)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from models_registry.models import BatchFile, BatchJob


def _ts(moment: datetime | None) -> int | None:
    return int(moment.timestamp()) if moment else None


def file_object(batch_file: BatchFile) -> dict[str, Any]:
    """OpenAI's File object."""
    return {
        "id": batch_file.public_id,
        "object": "file",
        "bytes": batch_file.bytes,
        "created_at": _ts(batch_file.created_at),
        "expires_at": _ts(batch_file.expires_at),
        "filename": batch_file.filename,
        "purpose": batch_file.purpose,
        "status": "processed",
        "status_details": None,
    }


def batch_object(job: BatchJob, input_file_id: str, output_file_id: str | None,
                 error_file_id: str | None) -> dict[str, Any]:
    """OpenAI's Batch object."""
    return {
        "id": job.public_id,
        "object": "batch",
        "endpoint": job.endpoint,
        "errors": {"object": "list", "data": job.errors} if job.errors else None,
        "input_file_id": input_file_id,
        "completion_window": job.completion_window,
        "status": job.status,
        "output_file_id": output_file_id,
        "error_file_id": error_file_id,
        "created_at": _ts(job.created_at),
        "in_progress_at": _ts(job.in_progress_at),
        "expires_at": _ts(job.expires_at),
        "finalizing_at": _ts(job.finalizing_at),
        "completed_at": _ts(job.completed_at),
        "failed_at": _ts(job.failed_at),
        "expired_at": _ts(job.expired_at),
        "cancelling_at": _ts(job.cancelling_at),
        "cancelled_at": _ts(job.cancelled_at),
        "request_counts": {"total": job.total, "completed": job.completed, "failed": job.failed},
        "metadata": job.metadata,
    }


def list_object(items: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    """OpenAI's cursor page: the SDK asks for the next page with after=<last_id>."""
    return {
        "object": "list",
        "data": items,
        "first_id": items[0]["id"] if items else None,
        "last_id": items[-1]["id"] if items else None,
        "has_more": has_more,
    }
