"""The admin pages of batch jobs: progress and timings, downloads, read-only rows, the cancel action."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import storages
from django.test import Client
from django.utils import timezone

from models_registry.models import ApiToken, BatchFile, BatchJob

JOBS = "/admin/models_registry/batchjob/"


@pytest.fixture(autouse=True)
def file_storage(settings: Any, tmp_path: Any) -> None:
    settings.STORAGES = {**settings.STORAGES, "default": {
        "BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": str(tmp_path)}}}


@pytest.fixture
def job(make_token: Callable[..., str]) -> BatchJob:
    make_token("team-a")
    owner = ApiToken.objects.get(name="team-a")
    name = storages["default"].save("out.jsonl", ContentFile(b'{"custom_id": "a"}\n'))
    source = BatchFile.objects.create(public_id="file-in", owner=owner, filename="in.jsonl", purpose="batch",
                                      bytes=10, lines=4, storage_name=name)
    output = BatchFile.objects.create(public_id="file-out", owner=owner, filename="out.jsonl",
                                      purpose="batch_output", bytes=19, lines=1, storage_name=name)
    now = timezone.now()
    return BatchJob.objects.create(public_id="batch_x", owner=owner, input_file=source, endpoint="/models/m",
                                   status="in_progress", total=4, completed=2, failed=1, output_file=output,
                                   in_progress_at=now - timedelta(seconds=10))


def test_the_job_list_shows_progress_owner_and_downloads(admin_client: Client, job: BatchJob) -> None:
    page = admin_client.get(JOBS).content.decode()
    assert "batch_x" in page and "3 / 4 (75%), 1 failed" in page and "team-a" in page and "lines/s" in page
    detail = admin_client.get(f"{JOBS}{job.pk}/change/")
    assert detail.status_code == 200 and b"/download/" in detail.content
    download = admin_client.get(f"/admin/models_registry/batchfile/{job.output_file.pk}/download/")
    assert download.status_code == 200 and b"".join(download.streaming_content) == b'{"custom_id": "a"}\n'


def test_rows_are_read_only_and_cancel_is_an_action(admin_client: Client, job: BatchJob) -> None:
    assert admin_client.get(f"{JOBS}add/").status_code == 403
    response = admin_client.post(JOBS, {"action": "cancel", "_selected_action": [job.pk]}, follow=True)
    assert response.status_code == 200
    job.refresh_from_db()
    assert job.status == "cancelling" and job.cancelling_at is not None


def test_downloads_need_staff(client: Client, job: BatchJob) -> None:
    response = client.get(f"/admin/models_registry/batchfile/{job.output_file.pk}/download/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_metrics_report_jobs_and_lines(client: Client, settings: Any, job: BatchJob) -> None:
    settings.HOSTING_METRICS_TOKEN = ""
    text = client.get("/metrics").content.decode()
    assert 'hosting_batch_jobs{status="in_progress"} 1.0' in text
    assert 'hosting_batch_lines_total{state="completed"} 2.0' in text
    assert 'hosting_batch_lines_total{state="failed"} 1.0' in text
    assert "hosting_batch_lines_pending 1.0" in text
