"""Every path is bounded: the admin, /dashboard/ and /metrics refuse oversized bodies before reading them.

Called through hosting.asgi's application, as a server would, so the wrapper around
Django's full stack is what is tested.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from models_registry.api.server.before_body import DRAIN_BYTES
from hosting.http_protocol import body_deadline_s

CHUNK = 64 * 1024
SITE_PATHS = ["/admin/login/", "/metrics", "/dashboard/"]


def scope(path: str, headers: list[tuple[bytes, bytes]], method: str = "POST", raw_path: bytes | None = None
          ) -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
            "path": path, "raw_path": raw_path or path.encode(), "root_path": "", "query_string": b"",
            "headers": [(b"host", b"127.0.0.1"), *headers], "server": ("127.0.0.1", 8000),
            "client": ("127.0.0.1", 5555)}


async def serve(request_scope: dict[str, Any], chunks: int) -> tuple[int, dict[bytes, bytes], bytes, int]:
    """(status, headers, body, body chunks the application asked for) for a body of chunks * CHUNK bytes."""
    from tests.asgi_client import production_application

    application = production_application()

    read = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal read
        if read >= chunks:
            await asyncio.Event().wait()  # the body is over: the client waits for its answer
        read += 1
        return {"type": "http.request", "body": b"x" * CHUNK, "more_body": read < chunks}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await asyncio.wait_for(application(request_scope, receive, send), 30)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), body, read


@pytest.mark.django_db
@pytest.mark.parametrize("path", SITE_PATHS)
async def test_a_declared_40_mib_body_is_refused_before_any_of_it_is_read(path: str, settings: Any) -> None:
    settings.HOSTING_MAX_BODY_BYTES = 1024 * 1024
    declared = 40 * 1024 * 1024
    status, headers, body, read = await serve(scope(path, [(b"content-length", str(declared).encode())]),
                                              chunks=declared // CHUNK)
    assert status == 413 and read == 0
    assert json.loads(body)["error_type"] == "too_large" and str(declared) in json.loads(body)["error"]
    assert headers[b"connection"] == b"close"  # not drained: the connection goes


@pytest.mark.django_db
@pytest.mark.parametrize("path", SITE_PATHS)
async def test_a_chunked_body_is_cut_off_at_the_limit(path: str, settings: Any) -> None:
    settings.HOSTING_MAX_BODY_BYTES = 1024 * 1024
    status, _, body, read = await serve(scope(path, [(b"transfer-encoding", b"chunked")]), chunks=1 << 14)
    assert status == 413 and json.loads(body)["error_type"] == "too_large"
    assert read <= (1024 * 1024 + DRAIN_BYTES) // CHUNK + 2, f"read {read} chunks of a body over the limit"


@pytest.mark.django_db
async def test_a_body_under_the_limit_still_reaches_django(settings: Any) -> None:
    settings.HOSTING_MAX_BODY_BYTES = 1024 * 1024
    status, _, _, read = await serve(scope("/admin/login/", [(b"content-length", str(2 * CHUNK).encode())]), 2)
    assert read == 2 and status == 403  # CSRF: Django read the body and answered it itself


@pytest.mark.django_db
@pytest.mark.parametrize("raw", [b"/models/all-minilm-l6-v2%2Ffeature-extraction", b"/models/a%2fb",
                                 b"/admin%2Flogin/"])
async def test_an_encoded_slash_does_not_route(raw: bytes) -> None:
    from urllib.parse import unquote

    status, _, body, _ = await serve(scope(unquote(raw.decode()), [], method="GET", raw_path=raw), chunks=0)
    assert status == 404 and json.loads(body)["error_type"] == "not_found" and "%2F" in json.loads(body)["error"]


def test_the_body_deadline_stops_growing_at_the_paths_limit(settings: Any) -> None:
    settings.HOSTING_MAX_BODY_BYTES = 1024 * 1024
    settings.HOSTING_BATCH_MAX_FILE_BYTES = 200 * 1024 * 1024
    mib = 1024 * 1024
    assert body_deadline_s(30, b"0", "/models/x") == 30
    assert body_deadline_s(30, str(mib).encode(), "/models/x") == 31
    capped = 30 + (mib + DRAIN_BYTES) / mib
    assert body_deadline_s(30, str(1 << 30).encode(), "/models/x") == capped  # not 30 + 1024
    assert body_deadline_s(30, str(1 << 30).encode(), "/admin/login/") == capped
    assert body_deadline_s(30, str(1 << 40).encode(), "/v1/files") < 30 + 300  # the largest limit: 200 MiB
    assert body_deadline_s(30, b"junk", "/models/x") == 30
