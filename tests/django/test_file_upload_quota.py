"""/v1/files uploads are rate-limited and counted like requests, and held to a storage quota per token.

Through the API's ASGI handler, as a server calls it: the refusals come before the body is read.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from django.utils import timezone

from models_registry.models import ApiToken, BatchFile, RegisteredModel
from tests.django.test_api_handler_limits import CHUNK, serve
from tests.django.test_batch_routes import _jsonl, _upload, file_storage  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens", "within_one_minute")]


BIG = 150 * 1024 * 1024  # announced, never sent: past what the handler drains


def _headers(token: str, length: int) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", b"multipart/form-data; boundary=x"), (b"content-length", str(length).encode()),
            (b"authorization", f"Bearer {token}".encode())]


def _keep(token_name: str, size: int, expires_in_s: float | None = None) -> None:
    """A file the token already keeps."""
    owner = ApiToken.objects.get(name=token_name)
    expires = timezone.now() + dt.timedelta(seconds=expires_in_s) if expires_in_s else None
    BatchFile.objects.create(public_id=f"file-kept{BatchFile.objects.count()}", owner=owner, filename="kept.jsonl",
                             purpose="batch", bytes=size, storage_name="nowhere", expires_at=expires)


@pytest.mark.usefixtures("broker")
async def test_uploads_past_the_tokens_requests_per_minute_are_429_unread(make_token: Callable[..., str]) -> None:
    token = await sync_to_async(make_token)("five-a-minute", requests_per_minute=5)
    answers = [await serve("/v1/files", _headers(token, 2 * CHUNK), chunks=2, client_waits=True) for _ in range(8)]
    assert [status for status, _, _ in answers[:5]] == [400] * 5  # counted, read (and not a multipart body)
    for status, body, _ in answers[5:]:  # (a small body is drained, so the client hears the answer)
        assert status == 429 and body["error"]["code"] == "rate_limited"
    status, _, read = await serve("/v1/files", _headers(token, BIG), chunks=BIG // CHUNK, client_waits=True)
    assert (status, read) == (429, 0)  # a large one is not read at all


async def test_an_upload_over_the_storage_quota_is_413_unread(make_token: Callable[..., str], settings: Any) -> None:
    settings.HOSTING_FILE_STORAGE_BYTES = 100 * 1024 * 1024
    token = await sync_to_async(make_token)("small")
    status, body, read = await serve("/v1/files", _headers(token, BIG), chunks=BIG // CHUNK, client_waits=True)
    assert (status, read) == (413, 0) and "HOSTING_FILE_STORAGE_BYTES" in body["error"]["message"]


async def test_an_upload_beside_files_kept_past_the_quota_is_429_until_one_expires(
        make_token: Callable[..., str], settings: Any) -> None:
    settings.HOSTING_FILE_STORAGE_BYTES = 200 * 1024 * 1024
    token = await sync_to_async(make_token)("keeper")
    await sync_to_async(_keep)("keeper", 100 * 1024 * 1024, expires_in_s=600)
    status, body, read = await serve("/v1/files", _headers(token, BIG), chunks=BIG // CHUNK, client_waits=True)
    assert (status, read) == (429, 0) and "storage quota" in body["error"]["message"]
    assert 590 <= int(body["error"]["message"].split("retry in ")[1].split(" s")[0]) <= 600
    status, _, read = await serve("/v1/files", _headers(token, CHUNK // 2), chunks=1, client_waits=True)
    assert status == 400 and read == 1  # what still fits is read (here: no multipart body)


@pytest.mark.usefixtures("file_storage")
async def test_the_route_checks_the_quota_again_with_the_files_real_size(
        make_model: Callable[..., RegisteredModel], make_token: Callable[..., str], settings: Any) -> None:
    await sync_to_async(make_model)("cls", task="text-classification")
    token = await sync_to_async(make_token)("route")
    settings.HOSTING_FILE_STORAGE_BYTES = 10_000
    await sync_to_async(_keep)("route", 9_900)
    response = await _upload(AsyncClient(), token, _jsonl(5))
    assert response.status_code == 429, response.content
    assert await sync_to_async(BatchFile.objects.filter(filename="in.jsonl").count)() == 0


@pytest.mark.usefixtures("file_storage", "broker")
async def test_concurrent_uploads_of_one_token_never_exceed_its_quota(
        make_model: Callable[..., RegisteredModel], make_token: Callable[..., str], settings: Any) -> None:
    """Issue 35: 16 concurrent 49 KB uploads against a 200 KB quota were all accepted (787 KB kept), twice."""
    import asyncio

    from models_registry.policy import upload_reservations
    from tests.asgi_client import AsyncClient as DoorClient

    await sync_to_async(make_model)("cls", task="text-classification")
    token = await sync_to_async(make_token)("burst")
    settings.HOSTING_FILE_STORAGE_BYTES = 200 * 1024
    content = _jsonl(600)[: 49 * 1024]
    content = content[: content.rfind(b"\n") + 1]  # whole lines, about 49 KB
    answers = await asyncio.gather(*(_upload(DoorClient(), token, content) for _ in range(16)))
    statuses = sorted(a.status_code for a in answers)
    kept = await sync_to_async(lambda: sum(BatchFile.objects.filter(owner__name="burst").values_list("bytes", flat=True)))()
    assert set(statuses) <= {200, 429}, [a.content for a in answers]
    assert kept <= settings.HOSTING_FILE_STORAGE_BYTES, (statuses, kept)
    # As many as fit: a refused upload holds no reservation that would crowd out one that fits.
    assert statuses.count(200) == settings.HOSTING_FILE_STORAGE_BYTES // len(content) == 4, statuses
    assert statuses.count(200) * len(content) == kept
    # Every reservation is dropped once its upload is answered: what is left is what is kept.
    layer = __import__("channels.layers", fromlist=["get_channel_layer"]).get_channel_layer()
    owner = await sync_to_async(lambda: ApiToken.objects.get(name="burst").pk)()
    assert await layer.connection(0).hlen(upload_reservations._key(layer, owner)) == 0
    assert (await _upload(DoorClient(), token, content)).status_code == 429  # and none more after


@pytest.mark.usefixtures("broker")
async def test_a_file_being_recorded_is_never_counted_twice(make_token: Callable[..., str], settings: Any) -> None:
    """Recording an upload's file and dropping its reservation is one step for every other check of the token.

    Both uploads fit (100 + 50 of 150 bytes); had the second check run between the file's record and
    the reservation's drop, it would have counted the first twice (250) and refused the second.
    """
    import asyncio

    from models_registry.policy import file_quota, upload_reservations

    await sync_to_async(make_token)("pair")
    owner = await sync_to_async(lambda: ApiToken.objects.get(name="pair").pk)()
    settings.HOSTING_FILE_STORAGE_BYTES = 150
    check = sync_to_async(file_quota.check)
    await upload_reservations.hold(owner, "first", 100, check)
    async with upload_reservations.settling(owner, "first"):
        await sync_to_async(_keep)("pair", 100)  # the first upload's file is kept now
        second = asyncio.ensure_future(upload_reservations.hold(owner, "second", 50, check))
        await asyncio.sleep(0.2)  # the second check waits for the lock: it must not see the file twice
        assert not second.done()
    await asyncio.wait_for(second, 10)  # fits: 100 kept + 50 reserved
    await upload_reservations.release(owner, "second")


async def _reserved(token_name: str) -> int:
    """How many reservations the token's uploads hold in Redis."""
    from channels.layers import get_channel_layer

    from models_registry.policy import upload_reservations

    layer = get_channel_layer()
    owner = await sync_to_async(lambda: ApiToken.objects.get(name=token_name).pk)()
    return await layer.connection(0).hlen(upload_reservations._key(layer, owner))


@pytest.mark.usefixtures("file_storage", "broker")
async def test_an_upload_refused_after_its_body_or_left_mid_body_holds_nothing(
        make_token: Callable[..., str]) -> None:
    """The reservation made before the body goes once the upload is answered, whatever the answer, and when its
    client goes away before the body is in."""
    import asyncio

    from models_registry.api.server.front_door import ApiASGIHandler
    from tests.asgi_client import AsyncClient as DoorClient
    from tests.django.test_api_handler_limits import scope

    token = await sync_to_async(make_token)("leaver")
    answer = await _upload(DoorClient(), token, _jsonl(2), purpose="fine-tune")
    assert answer.status_code == 400 and b"purpose" in answer.content
    assert await _reserved("leaver") == 0
    received = 0

    async def receive() -> dict[str, Any]:  # one chunk of the declared two, then the client is gone
        nonlocal received
        received += 1
        if received == 1:
            return {"type": "http.request", "body": b"x" * CHUNK, "more_body": True}
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        raise AssertionError(f"nothing is answered to a client gone: {message}")

    await asyncio.wait_for(ApiASGIHandler()(scope("/v1/files", [(b"host", b"127.0.0.1"),
                                                                 *_headers(token, 2 * CHUNK)]), receive, send), 10)
    assert received == 2 and await _reserved("leaver") == 0
