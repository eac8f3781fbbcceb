"""The API's ASGI handler refuses oversized bodies without reading them (called directly, as a server would)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from models_registry.api.server.before_body import DRAIN_BYTES
from models_registry.api.server.front_door import ApiASGIHandler

CHUNK = 64 * 1024


def scope(path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"", "headers": headers,
            "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 5555)}


async def serve(path: str, headers: list[tuple[bytes, bytes]], chunks: int,
                client_waits: bool = False) -> tuple[int, dict[str, Any], int]:
    """(status, JSON body, body chunks the handler asked for) for a body of chunks * CHUNK bytes.

    client_waits: once the body is over, the client waits for its answer (a receive then never returns).
    """
    read = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal read
        read += 1
        if client_waits and read > chunks:
            await asyncio.Event().wait()
        return {"type": "http.request", "body": b"x" * CHUNK, "more_body": read < chunks}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await ApiASGIHandler()(scope(path, [(b"host", b"127.0.0.1"), *headers]), receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], json.loads(body), min(read, chunks) if client_waits else read


@pytest.mark.parametrize("path", ["/models/any", "/v1/embeddings"])
async def test_a_content_length_far_over_the_limit_is_refused_before_reading(path: str, settings: Any) -> None:
    settings.HOSTING_MAX_BODY_BYTES = 1024 * 1024
    status, body, read = await serve(path, [(b"content-length", str(1 << 30).encode())], chunks=1 << 14)
    assert status == 413 and read == 0
    assert "1073741824 bytes" in json.dumps(body) and "too_large" in json.dumps(body)


async def test_a_body_a_little_over_the_limit_is_dropped_so_the_client_hears_the_413(settings: Any) -> None:
    settings.HOSTING_MAX_BODY_BYTES = 1024 * 1024
    chunks = 1024 * 1024 // CHUNK + 2
    status, body, read = await serve("/models/any", [(b"content-length", str(chunks * CHUNK).encode())], chunks)
    assert status == 413 and body["error_type"] == "too_large"
    assert read == chunks  # all of it read (and dropped): the sender is not cut off mid-body


async def test_a_chunked_body_is_cut_off_at_the_limit(settings: Any) -> None:
    settings.HOSTING_MAX_BODY_BYTES = 1024 * 1024
    status, body, read = await serve("/models/any", [(b"transfer-encoding", b"chunked")], chunks=1 << 14)
    assert status == 413 and body["error_type"] == "too_large"
    assert read <= (1024 * 1024 + DRAIN_BYTES) // CHUNK + 2, f"read {read} chunks of a body over the limit"


async def get(path: str, host: bytes) -> tuple[int, dict[bytes, bytes]]:
    """(status, headers) of a GET through the API handler."""
    sent: list[dict[str, Any]] = []
    calls = 0

    async def receive() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls > 1:
            await asyncio.Event().wait()  # the client stays connected until the handler is done
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    request = {**scope(path, [(b"host", host)]), "method": "GET"}
    await ApiASGIHandler()(request, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], {name.lower(): value for name, value in start["headers"]}


@pytest.mark.parametrize("path", ["/models", "/v1/models", "/models/any"])
async def test_api_paths_refuse_a_host_not_in_allowed_hosts(path: str, settings: Any) -> None:
    settings.ALLOWED_HOSTS = ["api.example"]
    status, headers = await get(path, b"evil.example")
    assert status == 400 and headers[b"x-content-type-options"] == b"nosniff"
    assert (await get(path, b"api.example"))[0] == 401  # past the host check: no token sent


async def test_probes_answer_any_host_and_every_answer_has_nosniff(settings: Any) -> None:
    settings.ALLOWED_HOSTS = ["api.example"]
    status, headers = await get("/health", b"10.1.2.3:8000")  # a kubelet probe uses the pod's IP
    assert status == 200
    assert headers[b"x-content-type-options"] == b"nosniff" and b"x-request-id" in headers
