"""Batch outputs count against their owner's storage quota before they are written (issue 50, item 6).

With HOSTING_FILE_STORAGE_BYTES=200000, three batch jobs of 49 KB inputs left 3.14 MB of outputs. Here the
job driver runs with a caller whose answers are far larger than their lines, as embeddings are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
from asgiref.sync import sync_to_async

from models_registry.core.errors import RateLimited
from models_registry.jobs.driver import JobDriver
from models_registry.jobs.line_calls import LineAnswer
from models_registry.jobs.lines import JobLine
from models_registry.models import ApiToken, BatchChunk, BatchFile, BatchJob, RegisteredModel
from models_registry.policy import file_quota
from tests.asgi_client import AsyncClient
from tests.django.test_batch_routes import _auth, _batch, _jsonl, _records, _run_until, _upload, file_storage  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens", "file_storage")]

ANSWER_BYTES = 1000  # each line's answer: an embedding's worth, against a line of about 75 bytes


class BigAnswers:
    """Answers every line 200 with about ANSWER_BYTES of JSON."""

    async def call(self, line: JobLine, owner_id: int | None, request_id: str) -> LineAnswer:
        return LineAnswer(200, orjson.dumps([{"label": "x" * ANSWER_BYTES, "score": 1.0}]))


@pytest.fixture
def token(make_token: Callable[..., str], make_model: Callable[..., RegisteredModel]) -> str:
    make_model("cls", task="text-classification")
    return make_token("owner")


def _kept_bytes() -> int:
    """The bytes of every live file of the owner (inputs and outputs)."""
    return sum(BatchFile.objects.filter(owner__name="owner", deleted_at__isnull=True).values_list("bytes", flat=True))


@pytest.mark.usefixtures("broker")
async def test_three_jobs_never_leave_more_than_the_quota(token: str, settings: Any) -> None:
    settings.HOSTING_FILE_STORAGE_BYTES = quota = 10_000
    settings.HOSTING_BATCH_CHUNK_LINES, settings.HOSTING_BATCH_IN_FLIGHT = 2, 2
    client = AsyncClient()
    inputs = [(await _upload(client, token, _jsonl(10))).json()["id"] for _ in range(3)]  # 3 x ~750 bytes
    jobs = []
    for file_id in inputs:
        batch_id = (await _batch(client, token, file_id)).json()["id"]
        jobs.append(await _run_until(JobDriver("w1", BigAnswers()), batch_id, ("completed", "failed")))
    assert await sync_to_async(_kept_bytes)() <= quota
    first, *others = jobs
    # The first job stops at the chunk that would not fit; what it committed before is its output.
    assert first.status == "failed" and 0 < first.completed < 10 and first.failed == 0
    output = await _records(client, token, first.output_file.public_id)
    assert [r["custom_id"] for r in output] == [f"r{i}" for i in range(first.completed)]
    [error] = first.errors
    assert error["code"] == "storage_quota_exceeded" and error["line"] == first.completed + 1
    assert "HOSTING_FILE_STORAGE_BYTES" in error["message"] and f"line {first.completed + 1}" in error["message"]
    batch = (await client.get(f"/v1/batches/{first.public_id}", headers=_auth(token))).json()
    assert batch["status"] == "failed" and batch["errors"]["data"][0]["code"] == "storage_quota_exceeded"
    assert batch["output_file_id"] == first.output_file.public_id
    # The others find the quota full: nothing written, nothing kept but their inputs.
    for job in others:
        assert (job.status, job.completed, job.output_file, job.error_file) == ("failed", 0, None, None)
        assert job.errors[0]["code"] == "storage_quota_exceeded" and job.errors[0]["line"] == 1
    from channels.layers import get_channel_layer

    from models_registry.policy import upload_reservations

    layer = get_channel_layer()
    owner = await sync_to_async(lambda: ApiToken.objects.get(name="owner").pk)()
    assert await layer.connection(0).hlen(upload_reservations._key(layer, owner)) == 0  # no chunk holds bytes


async def test_a_running_jobs_committed_output_counts_for_uploads(token: str, settings: Any) -> None:
    settings.HOSTING_FILE_STORAGE_BYTES = 10_000
    client = AsyncClient()
    file_id = (await _upload(client, token, _jsonl(10))).json()["id"]
    batch_id = (await _batch(client, token, file_id)).json()["id"]

    def commit_output(size: int) -> int:
        job = BatchJob.objects.get(public_id=batch_id)
        BatchChunk.objects.create(job=job, index=0, first_line=1, next_line=2, start_offset=0, end_offset=1,
                                  completed=1, output_part="parts/0", bytes=size)
        return job.owner_id

    owner_id = await sync_to_async(commit_output)(8_000)  # the job runs: its parts are not a file yet
    with pytest.raises(RateLimited, match="storage quota"):
        await sync_to_async(file_quota.check)(owner_id, 2_000)
    response = await _upload(client, token, _jsonl(30))
    assert response.status_code == 429 and "storage quota" in response.json()["error"]["message"]


async def test_a_cancelled_jobs_error_records_are_held_to_the_quota_too(token: str, settings: Any) -> None:
    settings.HOSTING_FILE_STORAGE_BYTES = 1_500  # the input (820 bytes) fits, not its 10 error records too
    client = AsyncClient()
    file_id = (await _upload(client, token, _jsonl(10))).json()["id"]
    batch_id = (await _batch(client, token, file_id)).json()["id"]
    assert (await client.post(f"/v1/batches/{batch_id}/cancel", headers=_auth(token))).status_code == 200
    job = await _run_until(JobDriver("w1", BigAnswers()), batch_id, ("cancelled",))
    assert job.error_file is None and await sync_to_async(_kept_bytes)() <= 1_500
    assert [e["code"] for e in job.errors] == ["storage_quota_exceeded"]
    assert "not written to the error file" in job.errors[0]["message"]
