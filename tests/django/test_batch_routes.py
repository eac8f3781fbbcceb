"""The Files and Batches routes, and the job driver with a stubbed line caller (no worker, no broker)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from asgiref.sync import sync_to_async
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone
from pydantic import TypeAdapter

from models_registry.api.openai import batch_schemas
from models_registry.jobs import files
from models_registry.jobs.driver import JobDriver
from models_registry.jobs.line_calls import LineAnswer
from models_registry.jobs.lines import JobLine
from models_registry.models import BatchChunk, BatchJob, RegisteredModel
from tests.asgi_client import AsyncClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens")]


@pytest.fixture(autouse=True)
def file_storage(settings: Any, tmp_path: Any) -> None:
    """Batch files in this test's own folder."""
    settings.STORAGES = {**settings.STORAGES, "default": {
        "BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": str(tmp_path / "files")}}}


@pytest.fixture
def models(make_model: Callable[..., RegisteredModel]) -> None:
    make_model("cls", task="text-classification")
    make_model("emb", task="feature-extraction", pooling="mean")
    make_model("other", task="text-classification")


@pytest.fixture
def token(make_token: Callable[..., str], models: None) -> str:
    return make_token("owner")


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _jsonl(count: int, url: str = "/models/cls", start: int = 0) -> bytes:
    return b"".join(orjson.dumps({"custom_id": f"r{i}", "method": "POST", "url": url,
                                  "body": {"inputs": f"text {i}"}}) + b"\n" for i in range(start, start + count))


async def _upload(client: AsyncClient, token: str, content: bytes, purpose: str = "batch") -> Any:
    upload = SimpleUploadedFile("in.jsonl", content, content_type="application/jsonl")
    return await client.post("/v1/files", {"file": upload, "purpose": purpose}, headers=_auth(token))


async def _batch(client: AsyncClient, token: str, file_id: str, endpoint: str = "/models/cls") -> Any:
    return await client.post("/v1/batches", json.dumps({"input_file_id": file_id, "endpoint": endpoint,
                                                        "completion_window": "24h"}),
                             content_type="application/json", headers=_auth(token))


async def test_upload_then_batch_in_openai_shapes(token: str) -> None:
    client = AsyncClient()
    response = await _upload(client, token, _jsonl(5))
    assert response.status_code == 200, response.content
    file_object = response.json()
    assert file_object["object"] == "file" and file_object["purpose"] == "batch" and file_object["id"].startswith("file-")
    assert file_object["bytes"] == len(_jsonl(5))
    response = await _batch(client, token, file_object["id"])
    assert response.status_code == 200, response.content
    batch = response.json()
    assert batch["object"] == "batch" and batch["status"] == "validating" and batch["id"].startswith("batch_")
    assert batch["request_counts"] == {"total": 5, "completed": 0, "failed": 0}
    assert batch["input_file_id"] == file_object["id"] and batch["expires_at"] - batch["created_at"] == 86400
    listed = (await client.get("/v1/batches?limit=1", headers=_auth(token))).json()
    assert [b["id"] for b in listed["data"]] == [batch["id"]] and listed["has_more"] is False
    files_page = (await client.get("/v1/files", headers=_auth(token))).json()
    # The answers have the shapes the OpenAPI document states.
    for shape, answer in ((batch_schemas.FileObject, file_object), (batch_schemas.Batch, batch),
                          (batch_schemas.BatchList, listed), (batch_schemas.FileList, files_page)):
        TypeAdapter(shape).validate_python(answer, strict=True)
    content = await client.get(f"/v1/files/{file_object['id']}/content", headers=_auth(token))
    assert b"".join([chunk async for chunk in content.streaming_content]) == _jsonl(5)


@pytest.mark.parametrize(("content", "status", "fragment"), [
    (b"not jsonl at all\n", 400, "line 1 is not valid JSON"),
    (_jsonl(2) + _jsonl(1), 400, "custom_id 'r0' is used twice"),
    (_jsonl(1, url="/models/nope"), 400, "no model named 'nope'"),
    (_jsonl(1, url="/v1/chat/completions"), 400, "is not served"),
    (orjson.dumps({"custom_id": "x", "method": "POST", "url": "/models/cls", "body": {"inputs": "y" * 3000}}),
     413, "line 1 is"),
])
async def test_bad_files_get_clear_errors(token: str, settings: Any, content: bytes, status: int,
                                          fragment: str) -> None:
    settings.HOSTING_MAX_BODY_BYTES = 2048
    response = await _upload(AsyncClient(), token, content)
    assert response.status_code == status
    assert fragment in response.json()["error"]["message"]


async def test_file_and_line_count_limits(token: str, settings: Any) -> None:
    settings.HOSTING_BATCH_MAX_LINES = 3
    response = await _upload(AsyncClient(), token, _jsonl(4))
    assert response.status_code == 413 and "more than 3 requests" in response.json()["error"]["message"]
    settings.HOSTING_BATCH_MAX_FILE_BYTES = 100
    response = await _upload(AsyncClient(), token, _jsonl(4))
    assert response.status_code == 413 and response.json()["error_type"] == "too_large"


async def test_purpose_and_endpoint_are_checked(token: str) -> None:
    client = AsyncClient()
    assert (await _upload(client, token, _jsonl(1), purpose="fine-tune")).status_code == 400
    file_id = (await _upload(client, token, _jsonl(1))).json()["id"]
    response = await _batch(client, token, file_id, endpoint="/models/other")
    assert response.status_code == 400 and "must be the batch's endpoint" in response.json()["error"]["message"]
    assert (await _batch(client, token, "file-missing")).status_code == 404


async def test_a_token_sees_only_its_own(token: str, make_token: Callable[..., str]) -> None:
    other = await sync_to_async(make_token)("someone-else")
    client = AsyncClient()
    file_id = (await _upload(client, token, _jsonl(1))).json()["id"]
    batch_id = (await _batch(client, token, file_id)).json()["id"]
    assert (await client.get(f"/v1/files/{file_id}", headers=_auth(other))).status_code == 404
    assert (await client.get(f"/v1/batches/{batch_id}", headers=_auth(other))).status_code == 404
    assert (await client.post(f"/v1/batches/{batch_id}/cancel", headers=_auth(other))).status_code == 404
    assert (await client.get("/v1/batches", headers=_auth(other))).json()["data"] == []
    assert (await client.get("/v1/batches")).status_code == 401


async def test_a_limited_token_cannot_batch_other_models(make_token: Callable[..., str], models: None) -> None:
    limited = await sync_to_async(make_token)("limited", models=[await RegisteredModel.objects.aget(name="cls")])
    response = await _upload(AsyncClient(), limited, _jsonl(1, url="/models/other"))
    assert response.status_code == 403


class FakeCaller:
    """Answers like the views would: 200 with the input echoed, a 503 first for some lines."""

    def __init__(self, flaky_every: int = 0, delay_s: float = 0.0) -> None:
        self.calls: list[str] = []
        self.flaky_every = flaky_every
        self.delay_s = delay_s

    async def call(self, line: JobLine, owner_id: int | None, request_id: str) -> LineAnswer:
        self.calls.append(line.custom_id)
        await asyncio.sleep(self.delay_s)
        index = int(line.custom_id[1:])
        if line.body["inputs"] == "text 3":
            return LineAnswer(400, b'{"error":"bad input","error_type":"invalid_input"}')
        if self.flaky_every and index % self.flaky_every == 0 and self.calls.count(line.custom_id) == 1:
            return LineAnswer(503, b'{"error":"restarting","error_type":"unavailable"}', retry_after_s=0.01)
        return LineAnswer(200, orjson.dumps([{"label": line.body["inputs"], "score": 1.0}]))


async def _run_until(driver: JobDriver, batch_id: str, statuses: tuple[str, ...], timeout_s: float = 20) -> BatchJob:
    task = asyncio.ensure_future(driver.run())
    try:
        for _ in range(int(timeout_s * 20)):
            job = await BatchJob.objects.select_related("output_file", "error_file").aget(public_id=batch_id)
            if job.status in statuses:
                return job
            await asyncio.sleep(0.05)
        raise AssertionError(f"batch stayed {job.status}")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _records(client: AsyncClient, token: str, file_id: str) -> list[dict[str, Any]]:
    response = await client.get(f"/v1/files/{file_id}/content", headers=_auth(token))
    return [orjson.loads(line) for line in b"".join([c async for c in response.streaming_content]).splitlines()]


async def test_the_driver_answers_every_line_once(token: str, settings: Any) -> None:
    settings.HOSTING_BATCH_CHUNK_LINES, settings.HOSTING_BATCH_IN_FLIGHT = 4, 6
    client = AsyncClient()
    file_id = (await _upload(client, token, _jsonl(30))).json()["id"]
    batch_id = (await _batch(client, token, file_id)).json()["id"]
    caller = FakeCaller(flaky_every=5)
    job = await _run_until(JobDriver("w1", caller), batch_id, ("completed",))
    batch = (await client.get(f"/v1/batches/{batch_id}", headers=_auth(token))).json()
    assert batch["request_counts"] == {"total": 30, "completed": 29, "failed": 1}
    assert batch["completed_at"] and batch["output_file_id"] and batch["error_file_id"]
    output = await _records(client, token, batch["output_file_id"])
    errors = await _records(client, token, batch["error_file_id"])
    assert [r["custom_id"] for r in output] == [f"r{i}" for i in range(30) if i != 3]  # input order
    assert all(r["response"]["body"][0]["label"] == f"text {r['custom_id'][1:]}" for r in output)
    assert [(r["custom_id"], r["response"]["status_code"], r["error"]["code"]) for r in errors] == \
        [("r3", 400, "invalid_input")]
    assert caller.calls.count("r5") == 2  # the 503 was retried, not recorded
    assert await BatchChunk.objects.filter(job=job).acount() == 8


async def test_a_job_resumes_after_its_driver_dies(token: str, settings: Any) -> None:
    settings.HOSTING_BATCH_CHUNK_LINES, settings.HOSTING_BATCH_IN_FLIGHT, settings.HOSTING_BATCH_LEASE_S = 4, 4, 1
    client = AsyncClient()
    file_id = (await _upload(client, token, _jsonl(40))).json()["id"]
    batch_id = (await _batch(client, token, file_id)).json()["id"]
    first = asyncio.ensure_future(JobDriver("dies", FakeCaller(delay_s=0.02)).run())
    while await BatchChunk.objects.filter(job__public_id=batch_id).acount() < 2:
        await asyncio.sleep(0.02)
    first.cancel()  # like a SIGKILL, but the lease is released: expire it as a dead worker's would be
    await asyncio.gather(first, return_exceptions=True)
    await BatchJob.objects.filter(public_id=batch_id).aupdate(lease_owner="dies")
    await _run_until(JobDriver("takes-over", FakeCaller()), batch_id, ("completed",))
    batch = (await client.get(f"/v1/batches/{batch_id}", headers=_auth(token))).json()
    output = await _records(client, token, batch["output_file_id"])
    errors = await _records(client, token, batch["error_file_id"])
    assert sorted(r["custom_id"] for r in output + errors) == sorted(f"r{i}" for i in range(40))


async def test_cancel_stops_the_job_and_closes_every_line(token: str, settings: Any) -> None:
    settings.HOSTING_BATCH_CHUNK_LINES, settings.HOSTING_BATCH_IN_FLIGHT = 4, 4
    client = AsyncClient()
    file_id = (await _upload(client, token, _jsonl(400))).json()["id"]
    batch_id = (await _batch(client, token, file_id)).json()["id"]
    task = asyncio.ensure_future(JobDriver("w1", FakeCaller(delay_s=0.01)).run())
    try:
        while await BatchChunk.objects.filter(job__public_id=batch_id).acount() < 1:
            await asyncio.sleep(0.02)
        cancelling = (await client.post(f"/v1/batches/{batch_id}/cancel", headers=_auth(token))).json()
        assert cancelling["status"] == "cancelling" and cancelling["cancelling_at"]
        for _ in range(200):
            batch = (await client.get(f"/v1/batches/{batch_id}", headers=_auth(token))).json()
            if batch["status"] == "cancelled":
                break
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert batch["status"] == "cancelled" and batch["cancelled_at"]
    output = await _records(client, token, batch["output_file_id"])
    errors = await _records(client, token, batch["error_file_id"])
    assert len(output) < 400 and {r["error"]["code"] for r in errors} <= {"batch_cancelled", "invalid_input"}
    assert sorted(r["custom_id"] for r in output + errors) == sorted(f"r{i}" for i in range(400))
    assert batch["request_counts"]["completed"] == len(output) and batch["request_counts"]["failed"] == len(errors)
    again = await client.post(f"/v1/batches/{batch_id}/cancel", headers=_auth(token))
    assert again.status_code == 400



async def test_an_expired_job_closes_its_remaining_lines(token: str, settings: Any) -> None:
    settings.HOSTING_BATCH_CHUNK_LINES, settings.HOSTING_BATCH_IN_FLIGHT = 4, 4
    client = AsyncClient()
    file_id = (await _upload(client, token, _jsonl(400))).json()["id"]
    batch_id = (await _batch(client, token, file_id)).json()["id"]
    task = asyncio.ensure_future(JobDriver("w1", FakeCaller(delay_s=0.03)).run())
    try:
        while await BatchChunk.objects.filter(job__public_id=batch_id).acount() < 1:
            await asyncio.sleep(0.02)
        await BatchJob.objects.filter(public_id=batch_id).aupdate(expires_at=timezone.now())
        job = await _wait_status(batch_id, "expired")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    batch = (await client.get(f"/v1/batches/{batch_id}", headers=_auth(token))).json()
    assert batch["status"] == "expired" and batch["expired_at"] and job.output_file_id
    output = await _records(client, token, batch["output_file_id"])
    errors = await _records(client, token, batch["error_file_id"])
    assert output and {r["error"]["code"] for r in errors} <= {"batch_expired", "invalid_input"}
    assert sorted(r["custom_id"] for r in output + errors) == sorted(f"r{i}" for i in range(400))


async def _wait_status(batch_id: str, status: str, tries: int = 400) -> BatchJob:
    """The job once it has status, polled every 50 ms; AssertionError when it has not after tries polls."""
    for _ in range(tries):
        job = await BatchJob.objects.aget(public_id=batch_id)
        if job.status == status:
            return job
        await asyncio.sleep(0.05)
    raise AssertionError(f"batch stayed {job.status}")


@pytest.mark.parametrize(("body", "param"), [
    ({"input_file_id": "file-x", "endpoint": "/v1/embeddings", "completion_window": {}}, "completion_window"),
    ({"input_file_id": "file-x", "endpoint": "/v1/chat/completions", "completion_window": "24h"}, "endpoint"),
    ({"input_file_id": "file-x", "endpoint": "/v1/embeddings", "completion_window": "24h", "metadata": {"k": 1}},
     "metadata"),
    ({"input_file_id": "file-x", "endpoint": "/v1/embeddings", "completion_window": "24h",
      "output_expires_after": {"anchor": "created_at", "seconds": 60}}, "output_expires_after"),
    ({"input_file_id": "file-x", "endpoint": "/v1/embeddings", "completion_window": "24h", "model": "m"}, "model"),
    ({"endpoint": "/v1/embeddings", "completion_window": "24h"}, "input_file_id"),
])
async def test_bad_batch_requests_name_their_field(token: str, body: dict[str, Any], param: str) -> None:
    response = await AsyncClient().post("/v1/batches", json.dumps(body), content_type="application/json",
                                        headers=_auth(token))
    assert response.status_code == 400 and response.json()["error"]["param"] == param


async def test_a_job_whose_input_vanished_fails_clearly(token: str) -> None:
    client = AsyncClient()
    file_id = (await _upload(client, token, _jsonl(3))).json()["id"]
    batch_id = (await _batch(client, token, file_id)).json()["id"]
    stored = await BatchJob.objects.select_related("input_file").aget(public_id=batch_id)
    await sync_to_async(files.delete_quietly)([stored.input_file.storage_name])
    await _run_until(JobDriver("w1", FakeCaller()), batch_id, ("failed",))
    batch = (await client.get(f"/v1/batches/{batch_id}", headers=_auth(token))).json()
    assert batch["status"] == "failed" and batch["failed_at"]
    assert batch["errors"]["data"][0]["code"] == "input_file_missing"
