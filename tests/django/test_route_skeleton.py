"""One route skeleton for every way in: the API's ASGI handler (no Django request), Django's views, job lines.

The same request must get the same answer whichever transport brought it; the handler's
own path must keep what Django's middleware gave (request ids, ALLOWED_HOSTS, nosniff)
and cancel a request whose client went away.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from models_registry.api.hf import hf_route
from models_registry.api.openai import openai_routes
from models_registry.api.server import route_table
from models_registry.api.tei import tei_routes, tokenize_route
from models_registry.api.server.front_door import ApiASGIHandler
from models_registry.api.pipeline.line_caller import LineCaller
from models_registry.broker.handoff import InferenceResult
from models_registry.jobs.lines import JobLine
from models_registry.models import RegisteredModel
from tests.asgi_client import AsyncClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens")]

LABELS = [[{"label": "POSITIVE", "score": 0.75}, {"label": "NEGATIVE", "score": 0.25}]]
TIMING_HEADERS = {"x-queue-time-ms", "x-inference-time-ms", "x-request-id", "content-length"}


def _labels(kwargs: dict[str, Any]) -> InferenceResult:
    return InferenceResult(outputs=LABELS * len(kwargs["inputs"]), queue_ms=1.0, compute_ms=2.0, batch_size=1)


@pytest.fixture
def models(make_model: Callable[..., RegisteredModel]) -> None:
    make_model("cls", task="text-classification", timeout_s=30.0)


@pytest.fixture
def token(make_token: Callable[..., str], models: None) -> str:
    return make_token("owner")


def _scope(path: str, headers: list[tuple[bytes, bytes]], method: str = "POST") -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
            "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"", "headers": headers,
            "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 5555)}


async def _through_handler(path: str, body: bytes, headers: dict[str, str],
                           gone: asyncio.Event | None = None) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of the API handler called as a server would; the client disconnects once gone is set."""
    sent: list[dict[str, Any]] = []
    given = 0

    async def receive() -> dict[str, Any]:
        nonlocal given
        given += 1
        if given == 1:
            return {"type": "http.request", "body": body, "more_body": False}
        await (gone or asyncio.Event()).wait()  # else the client stays until the answer is sent
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    raw = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
           *((name.lower().encode(), value.encode()) for name, value in headers.items())]
    await ApiASGIHandler()(_scope(path, raw), receive, send)
    if not sent:
        return 0, {}, b""
    start = next(m for m in sent if m["type"] == "http.response.start")
    answer = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode().lower(): v.decode() for k, v in start["headers"]}, answer


def test_the_route_table_names_every_inference_route() -> None:
    assert route_table.match("/models/cls") == (hf_route.ROUTE, {"name": "cls"})
    assert route_table.match("/models/cls/sentiment") == (hf_route.ROUTE, {"name": "cls", "task": "sentiment"})
    assert route_table.match("/v1/embeddings") == (openai_routes.EMBEDDINGS, {})
    assert route_table.match("/rerank") == (tei_routes.RERANK, {})
    assert route_table.match("/tokenize") == (tokenize_route.TOKENIZE, {})
    for other in ("/models", "/models/", "/models/a/b/c", "/models/a b", "/v1/files", "/tokenize/x", "/health"):
        assert route_table.match(other) is None, other


async def test_the_handler_and_django_give_the_same_answer(token: str, stub_worker: Any) -> None:
    calls = stub_worker(_labels)
    body = json.dumps({"inputs": ["good", "bad"]}).encode()
    auth = {"Authorization": f"Bearer {token}", "X-Request-Id": "same-1"}
    status, headers, fast = await _through_handler("/models/cls", body, auth)
    django = await AsyncClient().post("/models/cls", data=body, content_type="application/json", headers=auth)
    assert status == django.status_code == 200
    assert fast == django.content and json.loads(fast) == LABELS * 2
    assert headers["x-request-id"] == "same-1" and headers["x-content-type-options"] == "nosniff"
    assert headers["content-type"] == "application/json" and int(headers["content-length"]) == len(fast)
    shared = {k for k in headers if k not in TIMING_HEADERS}
    assert {k: headers[k] for k in shared} == {k: django.headers[k] for k in shared}
    assert len(calls) == 2 and calls[0]["priority"] == "interactive"


@pytest.mark.parametrize(("path", "body", "status", "error_type"), [
    ("/models/nope", {"inputs": "x"}, 404, "not_found"),
    ("/models/cls/nope", {"inputs": "x"}, 404, "not_found"),
    ("/models/cls", {"inputs": 5}, 400, "invalid_input"),
    ("/rerank", {"model": "cls", "query": "q", "texts": ["a"]}, 404, "not_found"),
])
async def test_errors_have_the_same_shape_both_ways(token: str, stub_worker: Any, path: str, body: Any, status: int,
                                                    error_type: str) -> None:
    stub_worker(_labels)
    raw = json.dumps(body).encode()
    auth = {"Authorization": f"Bearer {token}"}
    fast_status, headers, fast = await _through_handler(path, raw, auth)
    django = await AsyncClient().post(path, data=raw, content_type="application/json", headers=auth)
    assert fast_status == django.status_code == status
    assert json.loads(fast) == django.json() and json.loads(fast)["error_type"] == error_type
    assert "x-request-id" in headers and "Traceback" not in fast.decode()


async def test_openai_errors_keep_their_shape_on_the_handler(token: str, stub_worker: Any) -> None:
    stub_worker(_labels)
    status, headers, body = await _through_handler("/v1/embeddings", b'{"model": "cls", "input": "x"}',
                                                   {"Authorization": f"Bearer {token}"})
    error = json.loads(body)["error"]
    assert status == 400 and error["param"] == "model" and error["type"] == "invalid_request_error"


async def test_the_handler_checks_the_token_before_anything(token: str, stub_worker: Any) -> None:
    calls = stub_worker(_labels)
    status, _, body = await _through_handler("/models/cls", b'{"inputs": "x"}', {"Authorization": "Bearer nope"})
    assert status == 401 and json.loads(body)["error_type"] == "unauthorized" and calls == []


async def test_the_handler_refuses_a_host_not_allowed(token: str, stub_worker: Any, settings: Any) -> None:
    calls = stub_worker(_labels)
    settings.ALLOWED_HOSTS = ["api.example.com"]
    status, headers, body = await _through_handler("/models/cls", b'{"inputs": "x"}',
                                                   {"Authorization": f"Bearer {token}"})
    assert status == 400 and "Host header" in json.loads(body)["error"] and calls == []
    assert headers["x-content-type-options"] == "nosniff"


async def test_a_client_that_goes_away_cancels_its_request(token: str, stub_worker: Any) -> None:
    cancelled, computing = asyncio.Event(), asyncio.Event()

    async def slow(kwargs: dict[str, Any]) -> InferenceResult:
        computing.set()  # the client goes away now
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return _labels(kwargs)

    stub_worker(slow)
    status, _, _ = await asyncio.wait_for(_through_handler(
        "/models/cls", b'{"inputs": "x"}', {"Authorization": f"Bearer {token}"}, gone=computing), 5)
    assert status == 0 and cancelled.is_set()  # nothing was sent, and the hand-off was cancelled


async def test_a_job_line_gets_the_answer_the_same_http_request_gets(token: str, stub_worker: Any) -> None:
    from models_registry.models import ApiToken

    calls = stub_worker(_labels)
    owner = await ApiToken.objects.aget(name="owner")
    line = JobLine(number=1, custom_id="a", url="/models/cls", body={"inputs": ["good"]})
    answer = await LineCaller().call(line, owner.pk, "line-1")
    _, _, http = await _through_handler("/models/cls", b'{"inputs": ["good"]}', {"Authorization": f"Bearer {token}"})
    assert answer.status == 200 and answer.body == http
    assert calls[0]["priority"] == "batch" and calls[0]["request_id"] == "line-1"
