"""Admin pages of batch jobs and files: read-only rows, progress, downloads, a cancel action."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import FileResponse, Http404, HttpRequest
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from models_registry.jobs import files
from models_registry.models import BatchFile, BatchJob

FINAL_TIMES = ("completed_at", "failed_at", "expired_at", "cancelled_at")


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows written by the API and the job driver: viewed here, never edited."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _download(batch_file: BatchFile | None, label: str) -> str:
    if batch_file is None:
        return "-"
    url = reverse("admin:models_registry_batchfile_download", args=[batch_file.pk])
    return format_html('<a href="{}">{}</a> ({} lines)', url, label, batch_file.lines)


@admin.register(BatchJob)
class BatchJobAdmin(ReadOnlyAdmin):
    """Batches with their progress, owner, timings and output downloads."""

    list_display = ("public_id", "status", "progress", "owner", "endpoint", "created_at", "duration", "output",
                    "error_output")
    list_filter = ("status",)
    search_fields = ("public_id", "input_file__public_id", "owner__name")
    list_select_related = ("owner", "input_file", "output_file", "error_file")
    actions = ("cancel",)
    fields = ("public_id", "status", "progress", "owner", "endpoint", "input", "output", "error_output", "metadata",
              "errors", "created_at", "in_progress_at", "finalizing_at", "completed_at", "failed_at", "expired_at",
              "cancelling_at", "cancelled_at", "expires_at", "duration", "next_line", "lease_owner",
              "lease_expires_at")
    readonly_fields = fields

    @admin.display(description="progress")
    def progress(self, job: BatchJob) -> str:
        """Answered lines of all (and how many failed)."""
        done = job.completed + job.failed
        share = 100 * done / job.total if job.total else 100
        return f"{done} / {job.total} ({share:.0f}%), {job.failed} failed"

    @admin.display(description="duration")
    def duration(self, job: BatchJob) -> str:
        """From the first line to the end (or until now)."""
        if job.in_progress_at is None:
            return "-"
        end = next((getattr(job, f) for f in FINAL_TIMES if getattr(job, f)), None) or timezone.now()
        seconds = (end - job.in_progress_at).total_seconds()
        done = job.completed + job.failed
        return f"{seconds:.1f} s ({done / seconds:.1f} lines/s)" if seconds > 0 else "-"

    @admin.display(description="input")
    def input(self, job: BatchJob) -> str:
        """Download of the input file."""
        return _download(job.input_file, job.input_file.public_id)

    @admin.display(description="output")
    def output(self, job: BatchJob) -> str:
        """Download of the output file."""
        return _download(job.output_file, "output")

    @admin.display(description="errors")
    def error_output(self, job: BatchJob) -> str:
        """Download of the error file."""
        return _download(job.error_file, "errors")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        """The rows are read-only here, yet Django's change permission on batch jobs lets a user cancel them."""
        return request.user.has_perm(f"{self.opts.app_label}.change_batchjob")

    @admin.action(description="Cancel the selected batches", permissions=["cancel"])
    def cancel(self, request: HttpRequest, queryset: QuerySet[BatchJob]) -> None:
        """Running batches stop within seconds; the others are left as they are."""
        count = queryset.filter(status__in=("validating", "in_progress")).update(
            status="cancelling", cancelling_at=timezone.now())
        self.message_user(request, f"{count} batch(es) cancelling.", messages.SUCCESS)


@admin.register(BatchFile)
class BatchFileAdmin(ReadOnlyAdmin):
    """Uploaded inputs and the outputs of batches."""

    list_display = ("public_id", "purpose", "filename", "bytes", "lines", "owner", "created_at", "download")
    list_filter = ("purpose",)
    search_fields = ("public_id", "filename", "owner__name")
    readonly_fields = ("public_id", "purpose", "filename", "bytes", "lines", "urls", "owner", "storage_name",
                       "created_at", "expires_at", "download")
    fields = readonly_fields

    @admin.display(description="download")
    def download(self, batch_file: BatchFile) -> str:
        """Link to the file's bytes."""
        return _download(batch_file, "download")

    def get_urls(self) -> list[Any]:
        """The download view beside the admin's own."""
        view = self.admin_site.admin_view(self.download_view)
        return [path("<int:pk>/download/", view, name="models_registry_batchfile_download"), *super().get_urls()]

    def download_view(self, request: HttpRequest, pk: int) -> FileResponse:
        """The stored bytes of one file (staff only)."""
        batch_file = BatchFile.objects.filter(pk=pk).first()
        if batch_file is None or not self.has_view_permission(request, batch_file):
            raise Http404("no such file")
        return FileResponse(files.open_file(batch_file), as_attachment=True, filename=batch_file.filename)
