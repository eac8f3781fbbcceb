"""The usage ledger end to end: a token's requests reach GET /v1/usage within seconds, its own only, and a web
process killed mid-flush (counts handed off in Redis, its database transaction not committed) loses and doubles
nothing once it restarts."""

from __future__ import annotations

import asyncio
import sqlite3
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis

from models_registry.observe import ledger_flush
from tests import model_factory
from tests.integration.common import post_many, sentences
from tests.stack import Stack, http_json, wait_until

pytestmark = [pytest.mark.integration]

MODEL = "minilm"
PREFIX = "asgi"  # the channel layer's key prefix (channels_redis' default)


@pytest.fixture(scope="module")
def metered() -> Iterator[Stack]:
    """One worker, one web process flushing the ledger every second, and its tokens."""
    with Stack.started() as stack:
        stack.manage("register_model", MODEL, "--source", str(model_factory.minilm_path()), "--task",
                     "feature-extraction", "--pooling", "mean", "--max-batch-size", "32", "--timeout", "60")
        for name in ("all", "team-a", "team-b", "killed"):
            stack.create_token(name)
        stack.start_worker()
        stack.start_web(env={"HOSTING_USAGE_FLUSH_S": "1"})
        stack.wait_ready([MODEL])
        yield stack


def usage(stack: Stack, token: str) -> list[dict[str, Any]]:
    status, _, body = http_json("GET", stack.url + "/v1/usage", token=token, timeout=5)
    assert status == 200, body
    return body["data"]


def requests_of(stack: Stack, token: str) -> int:
    return sum(row["requests"] for row in usage(stack, token))


def answered(stack: Stack, token: str, count: int, seed: int) -> int:
    answers = asyncio.run(post_many(f"{stack.url}/models/{MODEL}", token, sentences(count, seed), concurrency=8))
    return sum(answer.status == 200 for answer in answers)


def test_a_fresh_tokens_25_requests_show_within_15_s_and_only_to_it(metered: Stack) -> None:
    team_a, team_b = metered.tokens["team-a"], metered.tokens["team-b"]
    assert answered(metered, team_a, 25, seed=1) == 25
    rows = wait_until(lambda: (found := usage(metered, team_a)) and found[0]["requests"] == 25 and found, 15,
                      "25 requests in GET /v1/usage")
    assert [row["model"] for row in rows] == [MODEL]
    assert rows[0]["input_tokens"] >= 25 * 5 and rows[0]["compute_seconds"] > 0 and rows[0]["errors"] == 0
    assert usage(metered, team_b) == []


@contextmanager
def ledger_held(stack: Stack) -> Iterator[None]:
    """The ledger's tables locked against writes from here (a flush blocks in its transaction) until the exit."""
    url = stack.env["DATABASE_URL"]
    if url.startswith("sqlite"):
        conn = sqlite3.connect(urllib.parse.urlsplit(url).path, isolation_level=None, timeout=10)
        conn.execute("BEGIN IMMEDIATE")  # the write lock; readers (WAL) go on
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    import psycopg

    with psycopg.connect(url) as conn:  # a transaction until the block ends
        conn.execute("LOCK TABLE models_registry_ledgerflush IN EXCLUSIVE MODE")
        yield
        conn.rollback()


def test_a_web_process_killed_mid_flush_loses_and_doubles_nothing(metered: Stack) -> None:
    token = metered.tokens["killed"]
    assert answered(metered, token, 1, seed=2) == 1  # its grant cached and last use written: no write below
    wait_until(lambda: requests_of(metered, token) == 1, 15, "the first request in the ledger")
    client = redis.Redis.from_url(metered.env["REDIS_URL"])
    web, port = metered.web[0]
    with ledger_held(metered):
        sent = answered(metered, token, 20, seed=3)
        assert sent == 20
        mine = f"{web.pid}-"

        def handed_off() -> list[bytes]:  # the web's flusher took the counts and waits on the database
            return [i for i in client.zrange(ledger_flush.index_key(PREFIX), 0, -1) if i.decode().startswith(mine)]

        held = wait_until(handed_off, 10, "the web process' flusher to hand the counts off")
        assert client.hlen(ledger_flush.flush_key(PREFIX, held[0].decode())) > 0
        web.kill()  # SIGKILL, mid-flush: its key stays in Redis, its transaction never commits
        web.wait(10)
    metered.web.pop(0)
    metered.start_web(port=port, env={"HOSTING_USAGE_FLUSH_S": "1"})
    # The restarted process takes the abandoned flush over once it is STALE_S old.
    wait_until(lambda: requests_of(metered, token) == 21, ledger_flush.STALE_MIN_S + 15, "the abandoned flush")
    wait_until(lambda: client.zcard(ledger_flush.index_key(PREFIX)) == 0, 10, "no flush left in Redis")
    assert requests_of(metered, token) == 21  # and it stays so: nothing applied twice
