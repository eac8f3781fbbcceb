"""The Files and Batches routes' paths through our modules, traced on the API handler as the inference routes' are.

They are Django views (api.batch_routes) behind the front door and the API middleware, not routes of the
skeleton: api.views' api_view is their skeleton (the method check, the view, the error's answer) and
api.batch_routes their route. Their database work runs in sync_to_async's threads, traced too. Each is held
to the rule of tests/django/test_request_path.py: no returns but the skeleton's calls into its route (and
the route's own helpers). An upload (POST /v1/files) is api.upload_route's, in the order the front door runs
it: admit before the body (its storage reserved, its request charged), the view's store_file (the reservation
handed on the call, adjusted to the file's real size and settled as the file is kept), release after the
answer; upload_route is its route (12 returns on 2026-11-27, when the front door, the view and the scope
each took a part: issue 37, item 3). The tables land in test-artifacts/batch-route-path-*.md.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import SyncToAsync, sync_to_async

from models_registry.api.front_door import ApiASGIHandler
from models_registry.models import RegisteredModel
from tests import path_trace
from tests.django.test_request_path import ANSWER_WRITTEN, BACKGROUND
from tests.path_trace import TRACING, PathTrace

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens")]

ARTIFACT = Path(__file__).resolve().parents[2] / "test-artifacts" / "batch-route-path.md"
ROUTE, SKELETON = "models_registry.api.batch_routes", "models_registry.api.views"
UPLOAD_ROUTE = "models_registry.api.upload_route"  # POST /v1/files: before the body, the view, after the answer
BOUNDARY = "path-trace-boundary"


@pytest.fixture(autouse=True)
def file_storage(settings: Any, tmp_path: Path) -> None:
    """Batch files in this test's own folder."""
    settings.STORAGES = {**settings.STORAGES, "default": {
        "BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": str(tmp_path / "files")}}}


def _upload_body() -> bytes:
    """A multipart upload of a JSONL file of two requests, purpose batch."""
    lines = b"".join(json.dumps({"custom_id": f"r{n}", "method": "POST", "url": "/models/cls",
                                 "body": {"inputs": f"text {n}"}}).encode() + b"\n" for n in range(2))
    return (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
            f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n"
            "Content-Type: application/jsonl\r\n\r\n").encode() + lines + f"\r\n--{BOUNDARY}--\r\n".encode()


async def _call(handler: ApiASGIHandler, method: str, path: str, token: str, body: bytes = b"",
                content_type: str = "application/json") -> tuple[int, bytes]:
    """One request on the API handler, as uvicorn hands it over: its status and body."""
    return await path_trace.call_handler(handler, method, path, body, [
        (b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode()),
        (b"authorization", f"Bearer {token}".encode())])


async def _traced(request: Callable[[], Awaitable[tuple[int, bytes]]],
                  route: str = ROUTE) -> tuple[int, bytes, PathTrace]:
    """request's answer, its path traced in this thread and in the threads its database work starts."""

    async def traced() -> tuple[int, bytes]:
        TRACING.set(True)
        return await request()

    trace = PathTrace(route, skeleton=[SKELETON], background=BACKGROUND, restarts=[ANSWER_WRITTEN])
    loop = asyncio.get_running_loop()
    # The views' database work runs in sync_to_async's one thread (the API handler opens no thread-sensitive
    # context); anything else in threads started from now on.
    await loop.run_in_executor(SyncToAsync.single_thread_executor, sys.setprofile, trace.profile)
    threading.setprofile(trace.profile)
    try:
        with trace:
            status, answer = await asyncio.ensure_future(traced())  # its own context: the set-up is not traced
    finally:
        threading.setprofile(None)
        await loop.run_in_executor(SyncToAsync.single_thread_executor, sys.setprofile, None)
    return status, answer, trace


async def test_the_files_and_batches_routes_never_go_back_up(
        broker: str, make_model: Callable[..., RegisteredModel], make_token: Callable[..., str]) -> None:
    await sync_to_async(make_model)("cls", task="text-classification")
    token = await sync_to_async(make_token)("owner")
    handler = ApiASGIHandler()
    status, answer = await _call(handler, "POST", "/v1/files", token, _upload_body(),
                                 f"multipart/form-data; boundary={BOUNDARY}")
    assert status == 200, answer
    file_id = json.loads(answer)["id"]
    batch = json.dumps({"input_file_id": file_id, "endpoint": "/models/cls", "completion_window": "24h"}).encode()
    status, answer = await _call(handler, "POST", "/v1/batches", token, batch)
    assert status == 200, answer
    batch_id = json.loads(answer)["id"]
    upload = f"multipart/form-data; boundary={BOUNDARY}"
    cases = {"file-upload": ("POST", "/v1/files", _upload_body()), "files-list": ("GET", "/v1/files", b""),
             "file": ("GET", f"/v1/files/{file_id}", b""),
             "batch-create": ("POST", "/v1/batches", batch), "batches-list": ("GET", "/v1/batches", b""),
             "batch": ("GET", f"/v1/batches/{batch_id}", b""),
             "batch-cancel": ("POST", f"/v1/batches/{batch_id}/cancel", b"")}
    reports = []
    ARTIFACT.parent.mkdir(exist_ok=True)  # a fresh clone has no test-artifacts/ yet
    for name, (method, path, body) in cases.items():
        kind = upload if name == "file-upload" else "application/json"
        if name != "batch-cancel":  # caches, connections (a cancel is traced the first time: a second finds it done)
            assert (await _call(handler, method, path, token, body, kind))[0] == 200, name
        route = UPLOAD_ROUTE if name == "file-upload" else ROUTE
        status, answer, trace = await _traced(lambda: _call(handler, method, path, token, body, kind), route)
        assert status == 200, (name, answer)
        report = path_trace.report(f"{method} {path} ({name})", "A Files or Batches route on the API handler, "
                                   "second request (caches warm); the database work's threads traced too.",
                                   trace.modules, trace.returns)
        ARTIFACT.with_name(f"batch-route-path-{name}.md").write_text(report)
        assert {ROUTE, route, "models_registry.jobs.store"} <= set(trace.modules), report  # the view's thread too
        reports.append((name, trace.returns, report))
    assert [(name, returns) for name, returns, _ in reports if returns] == [], "\n".join(r for _, _, r in reports)
