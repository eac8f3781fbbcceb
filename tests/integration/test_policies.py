"""Per-token limits, the response cache and priorities through real processes.

Uses the session stack plus a second web replica started here (and stopped at the end of
the module): both replicas share one rate-limit window and one response cache in Redis.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from email.message import Message
from pathlib import Path

import pytest

from tests import model_factory
from tests.integration.conftest import CLS, MINILM
from tests.stack import Stack, http_json, stop_process, wait_until

pytestmark = [pytest.mark.integration]

CACHED = "cached"  # a second task of MINILM with a response cache


@pytest.fixture(scope="module")
def replicas(stack: Stack, tiny_models: dict[str, Path]) -> Iterator[list[str]]:
    """The session stack's web server and a second one on the same Redis and database."""
    stack.manage("register_model", MINILM, "--source", str(model_factory.minilm_path()), "--task",
                 "feature-extraction", "--task-name", CACHED, "--pooling", "mean", "--normalize",
                 "--cache-ttl", "60", "--timeout", "60")
    second = stack.start_web()
    process = stack.web[-1][0]
    yield [stack.url, second]
    stop_process(process)
    stack.web = [entry for entry in stack.web if entry[0] is not process]
    # The session's other modules see MINILM as it was (GET /v1/models lists its tasks).
    stack.manage("shell", "-c", f"from models_registry.models import ModelTask; "
                 f"ModelTask.objects.filter(model__name={MINILM!r}, name={CACHED!r}).delete()")


def _label(stack: Stack, name: str) -> str:
    """The token's /metrics label: its id (open /metrics names no token)."""
    code = f"from models_registry.models import ApiToken; print(ApiToken.objects.get(name={name!r}).id)"
    return f"id:{stack.manage('shell', '-c', code).strip().splitlines()[-1]}"


def _token(stack: Stack, name: str, *options: str) -> str:
    token = stack.manage("create_api_token", name, *options).strip().splitlines()[-1]
    # A token is known to a web process within half a second of its creation.
    wait_until(lambda: http_json("GET", stack.url + "/models", token=token)[0] == 200, 10, f"token {name}")
    return token


def _post(url: str, token: str, text: str, path: str = f"/models/{CLS}", **headers: str) -> tuple[int, Message, bytes]:
    """(status, headers, the body's exact bytes)."""
    request = urllib.request.Request(url + path, data=json.dumps({"inputs": text}).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}",
                                              **headers})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.headers, response.read()  # headers: case-insensitive
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def test_two_replicas_share_one_rate_limit(stack: Stack, replicas: list[str]) -> None:
    # The burst must fall in one UTC minute (the limit's window): one that straddles a
    # rollover is sent again with a new token, instead of waiting for the next minute.
    for attempt in range(3):
        name = f"tiny-rpm-{attempt}"
        token = _token(stack, name, "--requests-per-minute", "6")
        minute = int(time.time() // 60)
        urls = [replicas[i % 2] for i in range(14)]  # 7 requests to each replica, all at once
        with ThreadPoolExecutor(max_workers=14) as pool:
            answers = list(pool.map(lambda pair: _post(pair[1], token, f"text {pair[0]}"), enumerate(urls)))
        if int(time.time() // 60) == minute:
            break
    else:
        raise AssertionError("three bursts in a row straddled a minute's rollover")
    statuses = sorted(status for status, _, _ in answers)
    assert statuses == [200] * 6 + [429] * 8, statuses
    refused = [(head, body) for status, head, body in answers if status == 429]
    for head, body in refused:
        assert b'"error_type":"rate_limited"' in body.replace(b" ", b"")
        assert head["X-RateLimit-Limit"] == "6" and head["X-RateLimit-Remaining"] == "0"
        assert 1 <= int(head["Retry-After"]) <= 60 and head["Retry-After"] == head["X-RateLimit-Reset"]
    # Each replica counted the requests it let through, under the token's id (open /metrics names none).
    label = _label(stack, name)
    assert sum(_counter(url, f'hosting_token_requests_total{{token="{label}"}}') for url in replicas) == 6


def test_token_quota_counts_the_workers_tokens(stack: Stack, replicas: list[str]) -> None:
    token = _token(stack, "tiny-tpd", "--tokens-per-day", "60")
    sent, refused = 0, b""
    for attempt in range(20):
        status, _, body = _post(replicas[attempt % 2], token, "a short sentence to classify")
        if status == 429:
            refused = body
            break
        assert status == 200
        sent += 1
        time.sleep(0.1)  # the correction to the worker's count lands after each answer
    assert b"tokens_per_day is 60" in refused and sent >= 5
    # What the workers counted for the answered requests: within the quota, and the refused
    # one (estimated 9 tokens) would have passed it.
    label = _label(stack, "tiny-tpd")
    charged = sum(_counter(url, f'hosting_token_input_tokens_total{{token="{label}"}}') for url in replicas)
    assert 60 - 9 < charged <= 60, (sent, charged)


def _counter(url: str, series: str) -> float:
    _, _, metrics = http_json("GET", url + "/metrics")
    line = next((line for line in metrics.splitlines() if line.startswith(series + " ")), None)
    return float(line.split()[-1]) if line else 0.0


def test_cache_hits_on_either_replica_are_byte_identical(stack: Stack, replicas: list[str]) -> None:
    token = stack.tokens["all"]
    path = f"/models/{MINILM}/{CACHED}"
    text = f"cached sentence {time.time()}"
    wait_until(lambda: _post(replicas[0], token, "warm-up", path)[0] == 200, 30, "the cached task on a worker")
    miss = _post(replicas[0], token, text, path)
    hit_here = _post(replicas[0], token, text, path)
    hit_there = _post(replicas[1], token, text, path)
    assert miss[0] == hit_here[0] == hit_there[0] == 200
    assert (miss[1]["X-Cache"], hit_here[1]["X-Cache"], hit_there[1]["X-Cache"]) == ("miss", "hit", "hit")
    assert miss[2] == hit_here[2] == hit_there[2]
    assert hit_there[1]["X-Batch-Size"] == "0" and int(miss[1]["X-Batch-Size"]) >= 1
    # A list with other parameters is another entry; the plain task has no cache at all.
    assert _post(replicas[0], token, text, f"/models/{MINILM}")[1].get("X-Cache") is None
    _, _, metrics = http_json("GET", replicas[1] + "/metrics")
    assert f'hosting_cache_lookups_total{{model="{MINILM}",result="hit",task="{CACHED}"}}' in metrics


def test_batch_priority_is_served_and_cannot_be_raised(stack: Stack, replicas: list[str]) -> None:
    bulk = _token(stack, "bulk", "--priority", "batch")
    answers = [_post(replicas[i % 2], bulk, f"bulk {i}") for i in range(4)]
    assert [status for status, _, _ in answers] == [200] * 4
    status, _, body = _post(replicas[0], bulk, "x", **{"X-Priority": "interactive"})
    assert status == 403 and b"batch priority" in body
    status, _, _ = _post(replicas[1], stack.tokens["all"], "y", **{"X-Priority": "batch"})
    assert status == 200
