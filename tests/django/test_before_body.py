"""/v1/files checks the token before reading a byte of the body, and a malformed Content-Length is a 400.

The API's ASGI handler is called directly, as a server would, with a body that counts
how much of it was asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from tests.django.test_api_handler_limits import CHUNK, serve

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens")]

UPLOAD = 150 * 1024 * 1024  # the 150 MB upload of the issue, announced but never sent


@pytest.mark.parametrize("authorization", [None, b"Bearer hst_not-a-token", b"Basic abc"])
async def test_an_upload_without_a_valid_token_is_refused_before_its_body_is_read(
        authorization: bytes | None, settings: Any) -> None:
    settings.HOSTING_BATCH_MAX_FILE_BYTES = 200 * 1024 * 1024
    headers = [(b"content-type", b"multipart/form-data; boundary=x"), (b"content-length", str(UPLOAD).encode())]
    if authorization:
        headers.append((b"authorization", authorization))
    status, body, read = await serve("/v1/files", headers, chunks=UPLOAD // CHUNK, client_waits=True)
    assert status == 401 and read == 0
    assert body["error"]["code"] == "unauthorized"  # OpenAI's error shape, as on the route itself


async def test_a_valid_token_still_uploads(make_token: Callable[..., str], settings: Any) -> None:
    token = await sync_to_async(make_token)("owner")
    headers = [(b"content-type", b"multipart/form-data; boundary=x"), (b"content-length", str(2 * CHUNK).encode()),
               (b"authorization", f"Bearer {token}".encode())]
    status, body, read = await serve("/v1/files", headers, chunks=2, client_waits=True)
    assert status == 400 and read == 2  # read, parsed, and found to be no multipart body
    assert body["error"]["code"] == "invalid_input"


@pytest.mark.parametrize("path", ["/v1/files", "/models/any", "/v1/embeddings"])
@pytest.mark.parametrize("length", [b"abc", b"-5", b"12, 12", b"1e3"])
async def test_a_malformed_content_length_is_a_400(path: str, length: bytes, make_token: Callable[..., str]) -> None:
    token = await sync_to_async(make_token)("owner")
    headers = [(b"content-length", length), (b"authorization", f"Bearer {token}".encode()),
               (b"content-type", b"multipart/form-data; boundary=x")]
    status, body, read = await serve(path, headers, chunks=1, client_waits=True)
    assert status == 400 and read == 0
    assert "malformed Content-Length" in str(body) and "invalid_input" in str(body)


@pytest.mark.parametrize("path", ["/models/any", "/v1/embeddings"])
async def test_a_host_not_allowed_is_refused_before_the_body_is_read(path: str, make_token: Callable[..., str],
                                                                     settings: Any) -> None:
    settings.ALLOWED_HOSTS = ["api.example.com"]  # the request says Host: 127.0.0.1
    token = await sync_to_async(make_token)("owner")
    headers = [(b"transfer-encoding", b"chunked"), (b"authorization", f"Bearer {token}".encode()),
               (b"content-type", b"application/json")]
    status, body, read = await serve(path, headers, chunks=4, client_waits=True)
    assert status == 400 and read == 0
    assert "Host header" in body["error"] and body["error_type"] == "invalid_input"
