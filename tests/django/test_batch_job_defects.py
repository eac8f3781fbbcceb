"""Batch job defects of issue 19, each a test: stream lines, rotated and revoked owners, owners' fair share.

The job driver runs here with the real line caller (the API views in-process) over a
stubbed hand-off, or with a fake caller where only the driver's decisions matter.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from asgiref.sync import sync_to_async

from models_registry.api.pipeline.line_caller import LineCaller
from models_registry.broker import stream_handoff
from models_registry.broker.handoff import InferenceResult
from models_registry.jobs.driver import JobDriver
from models_registry.jobs.line_calls import LineAnswer
from models_registry.jobs.lines import JobLine
from models_registry.models import ApiToken, BatchJob, RegisteredModel
from tests.asgi_client import AsyncClient
from tests.django.test_batch_routes import (  # noqa: F401
    _auth,
    _batch,
    _jsonl,
    _records,
    _run_until,
    _upload,
    _wait_status,
    file_storage,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens")]

LABELS = [[{"label": "POSITIVE", "score": 0.875}]]


@pytest.fixture
def models(make_model: Callable[..., RegisteredModel]) -> None:
    make_model("cls", task="text-classification")
    make_model("gpt", task="text-generation")


@pytest.fixture
def token(make_token: Callable[..., str], models: None) -> str:
    return make_token("owner")


def _labels(kwargs: dict[str, Any]) -> InferenceResult:
    return InferenceResult(outputs=LABELS * len(kwargs["inputs"]), queue_ms=1.0, compute_ms=1.0, batch_size=1)


async def test_a_stream_line_is_refused_and_opens_no_stream(token: str, stub_worker: Any,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    stub_worker(_labels)
    opened: list[dict[str, Any]] = []

    async def open_streams(*args: Any, **kwargs: Any) -> Any:  # what would start a generation on a worker
        opened.append(kwargs)
        raise AssertionError("a batch line opened a stream")

    monkeypatch.setattr(stream_handoff, "open_streams", open_streams)
    content = b"".join(orjson.dumps({"custom_id": f"s{i}", "method": "POST", "url": "/models/gpt",
                                     "body": {"inputs": "once upon", "stream": True}}) + b"\n" for i in range(3))
    client = AsyncClient()
    file_id = (await _upload(client, token, content)).json()["id"]
    batch_id = (await _batch(client, token, file_id, endpoint="/models/gpt")).json()["id"]
    job = await _run_until(JobDriver("w1", LineCaller()), batch_id, ("completed",))
    assert opened == []
    errors = await _records(client, token, job.error_file.public_id)
    assert [(r["custom_id"], r["response"]["status_code"], r["error"]["code"]) for r in errors] == \
        [(f"s{i}", 400, "invalid_input") for i in range(3)]
    assert "stream" in errors[0]["error"]["message"]


def _rotate(name: str) -> str:
    token = ApiToken.objects.get(name=name)
    raw = ApiToken.generate()
    token.set_token(raw)
    token.save()
    return raw


async def test_a_rotated_owner_token_keeps_its_job_running(token: str, stub_worker: Any, settings: Any) -> None:
    settings.HOSTING_BATCH_CHUNK_LINES, settings.HOSTING_BATCH_IN_FLIGHT = 2, 1
    from models_registry.policy import auth

    rotated: list[str] = []

    async def answer(kwargs: dict[str, Any]) -> InferenceResult:
        if not rotated:  # the owner rotates its token while the job runs
            rotated.append(await sync_to_async(_rotate)("owner"))
            auth.reset_cache()  # no grant cached from before the rotation helps
        return _labels(kwargs)

    calls = stub_worker(answer)
    client = AsyncClient()
    file_id = (await _upload(client, token, _jsonl(6))).json()["id"]
    batch_id = (await _batch(client, token, file_id)).json()["id"]
    job = await _run_until(JobDriver("w1", LineCaller()), batch_id, ("completed",))
    assert (job.completed, job.failed) == (6, 0) and len(calls) == 6
    assert len(await _records(client, rotated[0], job.output_file.public_id)) == 6  # read with the new token


async def test_a_revoked_owner_token_stops_its_job(token: str, stub_worker: Any, settings: Any) -> None:
    settings.HOSTING_BATCH_CHUNK_LINES, settings.HOSTING_BATCH_IN_FLIGHT = 4, 2

    async def answer(kwargs: dict[str, Any]) -> InferenceResult:
        await asyncio.sleep(0.01)
        return _labels(kwargs)

    calls = stub_worker(answer)
    client = AsyncClient()
    file_id = (await _upload(client, token, _jsonl(2000))).json()["id"]
    batch_id = (await _batch(client, token, file_id)).json()["id"]
    task = asyncio.ensure_future(JobDriver("w1", LineCaller()).run())
    try:
        while len(calls) < 8:
            await asyncio.sleep(0.01)
        await ApiToken.objects.filter(name="owner").aupdate(revoked=True)
        job = await _wait_status(batch_id, "cancelled", tries=200)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert job.status == "cancelled" and job.errors[0]["code"] == "token_revoked"
    assert len(calls) < 2000 and job.completed + job.failed == 2000
    await ApiToken.objects.filter(name="owner").aupdate(revoked=False)  # to read the error file
    job = await BatchJob.objects.select_related("error_file").aget(public_id=batch_id)
    errors = await _records(client, token, job.error_file.public_id)
    assert {r["error"]["code"] for r in errors} <= {"token_revoked", "unauthorized"}
    assert sum(r["error"]["code"] == "token_revoked" for r in errors) > 1000


class RateLimitedCaller:
    """The limited owner's lines (their inputs say "limited") are answered 429; everyone else's 200."""

    def __init__(self, retry_after_s: float) -> None:
        self.retry_after_s = retry_after_s
        self.calls: list[tuple[bool, str]] = []

    async def call(self, line: JobLine, owner: Any, request_id: str) -> LineAnswer:
        limited = line.body["inputs"].startswith("limited")
        self.calls.append((limited, line.custom_id))
        await asyncio.sleep(0.002)
        if limited:
            return LineAnswer(429, b'{"error":"rate limit","error_type":"rate_limited"}', self.retry_after_s)
        return LineAnswer(200, orjson.dumps(LABELS))


async def test_a_rate_limited_owner_does_not_block_another_owners_job(
        token: str, make_token: Callable[..., str], settings: Any) -> None:
    settings.HOSTING_BATCH_CHUNK_LINES, settings.HOSTING_BATCH_IN_FLIGHT = 4, 4
    settings.HOSTING_BATCH_LINE_RETRIES = 2
    other = await sync_to_async(make_token)("other")
    client = AsyncClient()
    content = _jsonl(12).replace(b'"text ', b'"limited ')
    first = (await _batch(client, token, (await _upload(client, token, content)).json()["id"])).json()["id"]
    second = (await _batch(client, other, (await _upload(client, other, _jsonl(40))).json()["id"])).json()["id"]
    caller = RateLimitedCaller(retry_after_s=0.2)
    driver = JobDriver("w1", caller)
    started = time.monotonic()
    task = asyncio.ensure_future(driver.run())
    try:
        done = await _wait_status(second, "completed", tries=200)
        waits = (time.monotonic() - started) / caller.retry_after_s  # Retry-After periods the other job took
        limited = await BatchJob.objects.aget(public_id=first)
        # The other owner's job ended while the rate-limited one, older, was still waiting on its limit.
        assert done.status == "completed" and (done.completed, done.failed) == (40, 0)
        assert limited.status == "in_progress"
        # The limited owner backs off: a chunk's lines tried once per Retry-After, not a spin over them (a spin
        # tries them every few ms). Bounded by the time taken, not a count: a loaded machine is slower, not wrong.
        in_flight = settings.HOSTING_BATCH_IN_FLIGHT
        assert sum(1 for limited, _ in caller.calls if limited) <= in_flight * (int(waits) + 2)
        # and its lines give up after their retries, into the error file
        limited = await _wait_status(first, "completed")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert limited.status == "completed" and (limited.completed, limited.failed) == (0, 12)
    tries = [custom_id for limited, custom_id in caller.calls if limited]
    assert all(tries.count(f"r{i}") == 3 for i in range(12))  # the first try and 2 retries


async def test_a_job_whose_owner_was_revoked_before_it_started_runs_no_line(token: str, stub_worker: Any) -> None:
    calls = stub_worker(_labels)
    client = AsyncClient()
    batch_id = (await _batch(client, token, (await _upload(client, token, _jsonl(5))).json()["id"])).json()["id"]
    await ApiToken.objects.filter(name="owner").aupdate(revoked=True)
    job = await _run_until(JobDriver("w1", LineCaller()), batch_id, ("cancelled",))
    assert calls == [] and (job.completed, job.failed) == (0, 5) and job.errors[0]["code"] == "token_revoked"
