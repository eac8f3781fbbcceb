"""The API's ASGI handler refuses oversized bodies without reading them (called directly, as a server would)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hosting.api_handler import ApiASGIHandler

CHUNK = 64 * 1024


def scope(path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"", "headers": headers,
            "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 5555)}


async def serve(path: str, headers: list[tuple[bytes, bytes]], chunks: int) -> tuple[int, dict[str, Any], int]:
    """(status, JSON body, body chunks the handler asked for) for a body of chunks * CHUNK bytes."""
    read = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal read
        read += 1
        return {"type": "http.request", "body": b"x" * CHUNK, "more_body": read < chunks}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await ApiASGIHandler()(scope(path, [(b"host", b"127.0.0.1"), *headers]), receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], json.loads(body), read


@pytest.mark.parametrize("path", ["/models/any", "/v1/embeddings"])
async def test_a_content_length_over_the_limit_is_refused_before_reading(path: str, settings: Any) -> None:
    settings.HOSTING_MAX_BODY_BYTES = 1024 * 1024
    status, body, read = await serve(path, [(b"content-length", str(1 << 30).encode())], chunks=1 << 14)
    assert status == 413 and read == 0
    assert "1073741824 bytes" in json.dumps(body) and "too_large" in json.dumps(body)


async def test_a_chunked_body_is_cut_off_at_the_limit(settings: Any) -> None:
    settings.HOSTING_MAX_BODY_BYTES = 1024 * 1024
    status, body, read = await serve("/models/any", [(b"transfer-encoding", b"chunked")], chunks=1 << 14)
    assert status == 413 and body["error_type"] == "too_large"
    assert read <= 1024 * 1024 // CHUNK + 1, f"read {read} chunks of a body over the limit"
