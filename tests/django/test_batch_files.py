"""Files that expire and can be deleted (issue 19): expires_after, the retention default, the drivers' sweep, DELETE."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from models_registry.jobs import files, retention
from models_registry.jobs.driver import JobDriver
from models_registry.models import BatchFile, BatchJob, RegisteredModel
from tests.asgi_client import AsyncClient
from tests.django.test_batch_routes import (  # noqa: F401
    FakeCaller,
    _auth,
    _batch,
    _jsonl,
    _run_until,
    _upload,
    file_storage,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens")]


@pytest.fixture
def token(make_model: Callable[..., RegisteredModel], make_token: Callable[..., str]) -> str:
    make_model("cls", task="text-classification")
    return make_token("owner")


async def _upload_expiring(client: AsyncClient, token: str, fields: dict[str, Any]) -> Any:
    upload = SimpleUploadedFile("in.jsonl", _jsonl(2), content_type="application/jsonl")
    return await client.post("/v1/files", {"file": upload, "purpose": "batch", **fields}, headers=_auth(token))


def _stored(name: str) -> bool:
    return files.storage().exists(name)


async def test_files_expire_after_what_the_upload_asks_or_the_retention_setting(token: str, settings: Any) -> None:
    settings.HOSTING_FILE_RETENTION_S = 7200
    client = AsyncClient()
    asked = await _upload_expiring(client, token, {"expires_after[anchor]": "created_at",
                                                   "expires_after[seconds]": "3600"})
    assert asked.status_code == 200, asked.content
    assert asked.json()["expires_at"] - asked.json()["created_at"] in (3600, 3601)
    default = (await _upload(client, token, _jsonl(2))).json()
    assert default["expires_at"] - default["created_at"] in (7200, 7201)
    settings.HOSTING_FILE_RETENTION_S = 0  # kept until deleted
    assert (await _upload(client, token, _jsonl(2))).json()["expires_at"] is None


@pytest.mark.parametrize("fields", [
    {"expires_after[anchor]": "last_active_at", "expires_after[seconds]": "3600"},
    {"expires_after[anchor]": "created_at", "expires_after[seconds]": "60"},
    {"expires_after[anchor]": "created_at", "expires_after[seconds]": "soon"},
    {"expires_after[anchor]": "created_at"},
])
async def test_bad_expires_after_is_a_400_naming_it(token: str, fields: dict[str, str]) -> None:
    response = await _upload_expiring(AsyncClient(), token, fields)
    assert response.status_code == 400 and response.json()["error"]["param"] == "expires_after"


async def test_the_driver_deletes_expired_files_but_not_a_running_batchs_input(token: str) -> None:
    client = AsyncClient()
    lone = (await _upload(client, token, _jsonl(2))).json()["id"]
    used = (await _upload(client, token, _jsonl(2))).json()["id"]
    batch_id = (await _batch(client, token, used)).json()["id"]
    past = timezone.now() - dt.timedelta(seconds=1)
    await BatchFile.objects.filter(public_id__in=[lone, used]).aupdate(expires_at=past)
    # Expired: hidden from the API at once, before any sweep.
    assert (await client.get(f"/v1/files/{lone}", headers=_auth(token))).status_code == 404
    assert lone not in [f["id"] for f in (await client.get("/v1/files", headers=_auth(token))).json()["data"]]
    lone_name = (await BatchFile.objects.aget(public_id=lone)).storage_name
    used_name = (await BatchFile.objects.aget(public_id=used)).storage_name
    assert await sync_to_async(retention.sweep)() == 1  # the batch (validating) still reads the other one
    assert not await BatchFile.objects.filter(public_id=lone).aexists() and not _stored(lone_name)
    assert _stored(used_name)
    retention.reset()
    await _run_until(JobDriver("w1", FakeCaller()), batch_id, ("completed",))  # its loop sweeps too
    retention.reset()
    task = asyncio.ensure_future(JobDriver("w1", FakeCaller()).run())
    try:
        for _ in range(100):
            if not _stored(used_name):
                break
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert not _stored(used_name)
    # The finished batch still names its (deleted) input; the file itself is gone.
    batch = (await client.get(f"/v1/batches/{batch_id}", headers=_auth(token))).json()
    assert batch["input_file_id"] == used
    assert (await client.get(f"/v1/files/{used}", headers=_auth(token))).status_code == 404


async def test_output_files_are_kept_as_output_expires_after_says(token: str) -> None:
    client = AsyncClient()
    file_id = (await _upload(client, token, _jsonl(4))).json()["id"]
    response = await client.post("/v1/batches", {"input_file_id": file_id, "endpoint": "/models/cls",
                                                 "completion_window": "24h",
                                                 "output_expires_after": {"anchor": "created_at", "seconds": 3600}},
                                 content_type="application/json", headers=_auth(token))
    batch_id = response.json()["id"]
    job = await _run_until(JobDriver("w1", FakeCaller()), batch_id, ("completed",))
    for kept in (job.output_file, job.error_file):
        assert dt.timedelta(seconds=3590) < kept.expires_at - kept.created_at <= dt.timedelta(seconds=3601)


async def test_delete_a_file_only_its_owner_and_not_while_a_batch_reads_it(
        token: str, make_token: Callable[..., str]) -> None:
    other = await sync_to_async(make_token)("someone-else")
    client = AsyncClient()
    file_id = (await _upload(client, token, _jsonl(2))).json()["id"]
    stored = (await BatchFile.objects.aget(public_id=file_id)).storage_name
    assert (await client.delete(f"/v1/files/{file_id}", headers=_auth(other))).status_code == 404
    assert (await client.delete(f"/v1/files/{file_id}")).status_code == 401
    batch_id = (await _batch(client, token, file_id)).json()["id"]
    refused = await client.delete(f"/v1/files/{file_id}", headers=_auth(token))
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "conflict"
    assert batch_id in refused.json()["error"]["message"] and _stored(stored)
    await BatchJob.objects.filter(public_id=batch_id).aupdate(status="cancelled")
    deleted = await client.delete(f"/v1/files/{file_id}", headers=_auth(token))
    assert deleted.status_code == 200 and deleted.json() == {"id": file_id, "object": "file", "deleted": True}
    assert not _stored(stored)
    assert (await client.get(f"/v1/files/{file_id}", headers=_auth(token))).status_code == 404
    assert (await client.delete(f"/v1/files/{file_id}", headers=_auth(token))).status_code == 404
    lone = (await _upload(client, token, _jsonl(2))).json()["id"]
    assert (await client.delete(f"/v1/files/{lone}", headers=_auth(token))).status_code == 200
    assert not await BatchFile.objects.filter(public_id=lone).aexists()  # no batch names it: no row kept


async def test_a_file_with_no_newline_is_refused_at_its_cap(token: str, settings: Any) -> None:
    settings.HOSTING_MAX_BODY_BYTES = 4096
    response = await _upload(AsyncClient(), token, b"x" * 3_000_000)
    assert response.status_code == 413
    assert "line 1 is 3000000 bytes; one request may be at most 4096" in response.json()["error"]["message"]


async def test_the_openai_sdk_sets_expiry_and_deletes(token: str) -> None:
    """The SDK's own encoding (expires_after[anchor] form fields, DELETE), through the API's ASGI handler."""
    import httpx
    from openai import AsyncOpenAI

    from models_registry.api.server.front_door import ApiASGIHandler

    transport = httpx.ASGITransport(app=ApiASGIHandler())
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        client = AsyncOpenAI(base_url="http://localhost/v1", api_key=token, http_client=http, max_retries=0)
        created = await client.files.create(file=("in.jsonl", _jsonl(2)), purpose="batch",
                                            expires_after={"anchor": "created_at", "seconds": 3600})
        assert created.expires_at is not None and created.expires_at - created.created_at in (3600, 3601)
        deleted = await client.files.delete(created.id)
        assert (deleted.id, deleted.deleted) == (created.id, True)
