"""Per-token limits, priorities and the response cache in the web process, against a real Redis.

The worker is replaced by a stub hand-off: what is tested is what the web decides (429s
and their headers, the priority and queue limit a request is sent with, cache hits that
never reach the hand-off) and the Lua script's atomicity under concurrent callers.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import redis
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.core.management import CommandError, call_command

from models_registry.broker import enqueue
from models_registry.broker.handoff import InferenceResult
from models_registry.core.errors import RateLimited, TooLarge, Unavailable
from models_registry.models import ApiToken, ModelTask, RegisteredModel
from models_registry.policy import auth, charges, dispatch, gate, rate_limits, serving
from models_registry.catalog import lookups
from tests.asgi_client import AsyncClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens", "broker", "within_one_minute")]

@pytest.fixture
def cls(make_model: Callable[..., RegisteredModel]) -> RegisteredModel:
    return make_model("cls", task="text-classification", cache_ttl_s=60, max_queue_size=100)


async def post(client: AsyncClient, token: str, text: str = "so good", path: str = "/models/cls",
               **headers: str) -> Any:
    return await client.post(path, data=json.dumps({"inputs": text}), content_type="application/json",
                             headers={"Authorization": f"Bearer {token}", **headers})


# --- the Lua script ----------------------------------------------------------------------


async def charged(conn: Any, prefix: str, token_id: int, limits: rate_limits.Limits, tokens: int,
                 now: float) -> rate_limits.Charge:
    """The enqueue script's charge part alone, as the gate runs it for a request no worker computes."""
    plan = rate_limits.plan(prefix, token_id, limits, tokens, now)
    await enqueue.run(conn, plan)
    return charges.outcome(plan, limits, now)


async def test_concurrent_reservations_never_pass_the_limit() -> None:
    layer = get_channel_layer()
    limits = rate_limits.Limits(requests_per_minute=5)
    now = 1_000_020.5  # early in a minute: the window cannot roll over during the test

    async def one() -> bool:
        try:
            await charged(layer.connection(0), layer.prefix, 1, limits, 3, now=now)
            return True
        except RateLimited:
            return False

    admitted = await asyncio.gather(*(one() for _ in range(40)))
    assert sum(admitted) == 5
    with pytest.raises(RateLimited) as refused:
        await charged(layer.connection(0), layer.prefix, 1, limits, 3, now=now + 10)
    assert refused.value.headers["X-RateLimit-Limit"] == "5"
    assert refused.value.headers["X-RateLimit-Remaining"] == "0"
    assert refused.value.headers["Retry-After"] == refused.value.headers["X-RateLimit-Reset"] == "50"
    # The next minute is a new window.
    await charged(layer.connection(0), layer.prefix, 1, limits, 3, now=now + 60)


async def test_tokens_are_charged_as_estimated_then_corrected() -> None:
    layer = get_channel_layer()
    conn, now = layer.connection(0), 2_000_000.0
    limits = rate_limits.Limits(tokens_per_minute=100, tokens_per_day=1000)
    charge = await charged(conn, layer.prefix, 2, limits, 60, now=now)
    assert charge.headers["X-RateLimit-Remaining"] == "40"  # the minute's is the tighter limit
    with pytest.raises(RateLimited, match="tokens_per_minute is 100"):
        await charged(conn, layer.prefix, 2, limits, 60, now=now)
    await rate_limits.settle(conn, charge, 10)  # the worker counted 10, not 60
    again = await charged(conn, layer.prefix, 2, limits, 60, now=now)
    assert again.headers["X-RateLimit-Remaining"] == "30"
    with pytest.raises(TooLarge, match="over this API token's tokens_per_minute limit of 100"):
        await charged(conn, layer.prefix, 2, limits, 101, now=now)


def test_estimate_counts_bytes_and_special_tokens() -> None:
    assert rate_limits.estimate_tokens(["abcd" * 10]) == 12
    assert rate_limits.estimate_tokens(["", "é"]) == 2 + 3  # at least the specials; UTF-8 bytes
    assert rate_limits.estimate_tokens([{"question": "who", "context": "me"}]) == 2 + 2


async def test_batch_messages_queue_behind_interactive_ones_sent_later() -> None:
    layer = get_channel_layer()
    await layer.send("inference.m", {"type": "inference.request", "id": "bulk", "priority": "batch"})
    await layer.send("inference.m", {"type": "inference.request", "id": "ui", "priority": "interactive"})
    await layer.send("inference.m", {"type": "inference.request", "id": "bulk2", "priority": "batch"})
    pulled = await layer.pull(["inference.m"], "w1", 3)
    assert [message["id"] for _, message, _ in pulled] == ["ui", "bulk", "bulk2"]


# --- the views -----------------------------------------------------------------------------


async def test_requests_over_the_limit_get_429_with_headers(
    make_token: Callable[..., str], cls: RegisteredModel, calls: list[dict[str, Any]],
) -> None:
    token = await sync_to_async(make_token)("tight", requests_per_minute=2)
    client = AsyncClient()
    first = await post(client, token, "one")
    assert first.status_code == 200, first.content
    assert first["X-RateLimit-Limit"] == "2" and first["X-RateLimit-Remaining"] == "1"
    assert 1 <= int(first["X-RateLimit-Reset"]) <= 60
    assert (await post(client, token, "two")).status_code == 200
    refused = await post(client, token, "three")
    assert refused.status_code == 429, refused.content
    assert refused.json()["error_type"] == "rate_limited"
    assert "requests_per_minute is 2" in refused.json()["error"]
    assert refused["Retry-After"] == refused["X-RateLimit-Reset"]
    assert refused["X-RateLimit-Remaining"] == "0"
    assert len(calls) == 2  # the refused request never reached a worker
    metrics = (await client.get("/metrics")).content.decode()
    label = f"id:{(await ApiToken.objects.aget(name='tight')).id}"  # open /metrics names no token
    assert f'hosting_rate_limited_total{{limit="rate",token="{label}"}} 1.0' in metrics
    assert f'hosting_token_requests_total{{token="{label}"}} 2.0' in metrics
    assert "tight" not in metrics


async def test_a_charge_alone_fails_open_when_the_broker_does_not_answer(
    make_token: Callable[..., str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    token = await sync_to_async(make_token)("unmetered", requests_per_minute=1)
    grant = await auth.authorize(f"Bearer {token}", None)

    async def unreachable(*args: Any) -> tuple[int, int]:
        raise ConnectionError("refused")

    monkeypatch.setattr(enqueue, "run", unreachable)
    for _ in range(2):  # past its one request a minute: nothing was counted
        assert (await gate.admit(gate.Ask(grant, ["hello"]))).headers == {}
    assert "rate limits not checked: the broker did not answer (ConnectionError)" in caplog.text
    metrics = (await AsyncClient().get("/metrics")).content.decode()
    assert f'hosting_token_requests_total{{token="id:{grant.token_id}"}}' not in metrics


async def test_openai_route_shares_the_limit(
    make_model: Callable[..., RegisteredModel], make_token: Callable[..., str], calls: list[dict[str, Any]],
) -> None:
    await sync_to_async(make_model)("emb", task="feature-extraction")
    token = await sync_to_async(make_token)("one-a-minute", requests_per_minute=1)
    client = AsyncClient()
    body = json.dumps({"model": "emb", "input": "hello"})
    headers = {"Authorization": f"Bearer {token}"}
    calls_before = len(calls)
    await client.post("/v1/embeddings", data=body, content_type="application/json", headers=headers)
    refused = await client.post("/v1/embeddings", data=body, content_type="application/json", headers=headers)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limited" and refused["Retry-After"]
    assert len(calls) == calls_before + 1


async def test_failed_requests_are_refunded_their_tokens(
    make_token: Callable[..., str], cls: RegisteredModel, monkeypatch: pytest.MonkeyPatch,
) -> None:
    token = await sync_to_async(make_token)("tokens", tokens_per_minute=40)

    def serves(spec: Any, task: str, wire: str, workers: Any) -> float:
        return 0.0

    async def overloaded(**kwargs: Any) -> InferenceResult:
        raise Unavailable("no worker")

    monkeypatch.setattr(serving, "serving_rate", serves)
    monkeypatch.setattr(dispatch.handoff, "infer", overloaded)
    client = AsyncClient()
    text = "x" * 100  # about 27 tokens: a second one fits only if the first was refunded
    for _ in range(3):
        assert (await post(client, token, text)).status_code == 503
        await asyncio.sleep(0.05)  # the refund runs in the background


async def test_priority_header_lowers_but_never_raises(
    make_token: Callable[..., str], cls: RegisteredModel, calls: list[dict[str, Any]],
) -> None:
    interactive = await sync_to_async(make_token)("ui")
    batch = await sync_to_async(make_token)("bulk", priority="batch")
    client = AsyncClient()
    assert (await post(client, interactive, "a")).status_code == 200
    assert (await post(client, interactive, "b", **{"X-Priority": "batch"})).status_code == 200
    assert (await post(client, batch, "c")).status_code == 200
    by_option = await client.post("/models/cls", data=json.dumps({"inputs": "f", "options": {"priority": "batch"}}),
                                  content_type="application/json", headers={"Authorization": f"Bearer {interactive}"})
    assert by_option.status_code == 200
    assert [c["priority"] for c in calls] == ["interactive", "batch", "batch", "batch"]
    # Batch traffic is refused past its own limit: half the queue unless the task sets one.
    assert [c["max_queue_size"] for c in calls] == [100, 50, 50, 50]
    forbidden = await post(client, batch, "d", **{"X-Priority": "interactive"})
    assert forbidden.status_code == 403 and "batch priority" in forbidden.json()["error"]
    invalid = await post(client, interactive, "e", **{"X-Priority": "urgent"})
    assert invalid.status_code == 400 and "must be interactive or batch, not 'urgent'" in invalid.json()["error"]
    assert len(calls) == 4


async def test_cache_hits_skip_the_worker_with_identical_bodies(
    make_token: Callable[..., str], cls: RegisteredModel, calls: list[dict[str, Any]],
) -> None:
    token = await sync_to_async(make_token)("reader", tokens_per_day=1000)
    client = AsyncClient()
    miss = await post(client, token, "same text")
    hit = await post(client, token, "same text")
    other = await post(client, token, "other text")
    assert (miss["X-Cache"], hit["X-Cache"], other["X-Cache"]) == ("miss", "hit", "miss")
    assert hit.content == miss.content
    assert hit["X-Batch-Size"] == "0" and hit["X-Queue-Time-Ms"] == "0.00"
    assert len(calls) == 2
    # A hit counts as a request and is charged the tokens the worker counted for the miss;
    # the headers tell what was left once this request's estimate was reserved.
    await asyncio.sleep(0.05)
    third = await post(client, token, "same text")
    assert int(third["X-RateLimit-Remaining"]) == 1000 - 3 * 7 - rate_limits.estimate_tokens(["same text"])
    metrics = (await client.get("/metrics")).content.decode()
    assert 'hosting_cache_lookups_total{model="cls",result="hit",task="text-classification"} 2.0' in metrics


async def test_use_cache_false_computes_afresh_and_refreshes_the_entry(
    make_token: Callable[..., str], cls: RegisteredModel, calls: list[dict[str, Any]],
) -> None:
    token = await sync_to_async(make_token)("reader")
    client = AsyncClient()
    assert (await post(client, token, "fresh"))["X-Cache"] == "miss"
    forced = await client.post("/models/cls", data=json.dumps({"inputs": "fresh", "options": {"use_cache": False}}),
                               content_type="application/json", headers={"Authorization": f"Bearer {token}"})
    assert forced.status_code == 200 and forced["X-Cache"] == "miss"
    assert (await post(client, token, "fresh"))["X-Cache"] == "hit"
    assert len(calls) == 2


async def test_a_reload_or_new_parameters_miss_the_cache(
    make_token: Callable[..., str], cls: RegisteredModel, calls: list[dict[str, Any]],
) -> None:
    token = await sync_to_async(make_token)("reader")
    client = AsyncClient()
    assert (await post(client, token, "text"))["X-Cache"] == "miss"
    assert (await post(client, token, "text"))["X-Cache"] == "hit"
    await sync_to_async(RegisteredModel.objects.filter(name="cls").update)(load_generation=1)
    lookups.reset()
    assert (await post(client, token, "text"))["X-Cache"] == "miss"
    await sync_to_async(cls.tasks.update)(parameters={"top_k": 1})
    lookups.reset()
    assert (await post(client, token, "text"))["X-Cache"] == "miss"
    assert len(calls) == 3


async def test_tasks_without_a_ttl_are_not_cached(
    make_model: Callable[..., RegisteredModel], make_token: Callable[..., str], calls: list[dict[str, Any]],
) -> None:
    await sync_to_async(make_model)("plain", task="text-classification")
    token = await sync_to_async(make_token)("reader")
    client = AsyncClient()
    first = await post(client, token, "text", path="/models/plain")
    second = await post(client, token, "text", path="/models/plain")
    assert not first.has_header("X-Cache") and not second.has_header("X-Cache")
    assert not first.has_header("X-RateLimit-Limit")  # no limits set: no rate headers
    assert len(calls) == 2


# --- the admin -----------------------------------------------------------------------------


def test_admin_shows_usage_today_and_this_month(admin_client: Any, make_token: Callable[..., str],
                                                 broker: str) -> None:
    make_token("counted")
    token = ApiToken.objects.get(name="counted")
    client = redis.Redis.from_url(broker)
    for key in rate_limits.usage_keys(get_channel_layer().prefix, token.pk, time.time())[1:]:  # day, month
        client.hset(key, mapping={"r": 3, "t": 120})
    page = admin_client.get("/admin/models_registry/apitoken/").content.decode()
    assert page.count("3 requests, 120 tokens") == 2
    change = admin_client.get(f"/admin/models_registry/apitoken/{token.pk}/change/").content.decode()
    assert change.count("3 requests, 120 tokens") == 2


# --- the commands and validation -------------------------------------------------------------


def test_create_api_token_sets_limits_and_priority(transactional_db: None) -> None:
    out = StringIO()
    call_command("create_api_token", "svc", "--requests-per-minute", "60", "--tokens-per-day", "5000",
                 "--priority", "batch", stdout=out)
    token = ApiToken.objects.get(name="svc")
    assert (token.requests_per_minute, token.tokens_per_minute, token.tokens_per_day) == (60, None, 5000)
    assert token.priority == "batch"
    assert "batch priority, requests per minute 60, tokens per day 5000" in out.getvalue()
    call_command("create_api_token", "svc", stdout=StringIO())  # the command states it all: defaults again
    token.refresh_from_db()
    assert (token.requests_per_minute, token.tokens_per_day, token.priority) == (None, None, "interactive")
    with pytest.raises(CommandError, match="--tokens-per-minute must be at least 1"):
        call_command("create_api_token", "svc", "--tokens-per-minute", "0", stdout=StringIO())


def test_cache_ttl_only_on_deterministic_tasks(transactional_db: None, tmp_path: Path) -> None:
    call_command("register_model", "emb", "--source", str(tmp_path), "--task", "feature-extraction",
                 "--cache-ttl", "300", "--max-batch-queue-size", "100", stdout=StringIO())
    task = ModelTask.objects.get(model__name="emb")
    assert (task.cache_ttl_s, task.max_batch_queue_size) == (300, 100)
    with pytest.raises(CommandError, match="text-generation is not deterministic"):
        call_command("register_model", "gen", "--source", str(tmp_path), "--task", "text-generation",
                     "--cache-ttl", "60", stdout=StringIO())
    with pytest.raises(CommandError, match="max_batch_queue_size .2000. is above max_queue_size .1024."):
        call_command("register_model", "emb", "--source", str(tmp_path), "--task", "feature-extraction",
                     "--max-batch-queue-size", "2000", stdout=StringIO())


async def test_rerank_counts_against_the_same_limit(
    make_model: Callable[..., RegisteredModel], make_token: Callable[..., str],
    stub_worker: Callable[..., list[dict[str, Any]]],
) -> None:
    await sync_to_async(make_model)("ranker", task="text-ranking")
    token = await sync_to_async(make_token)("ranking", requests_per_minute=1)
    stub_worker(lambda kwargs: InferenceResult(outputs=[0.5] * len(kwargs["inputs"]), queue_ms=1.0, compute_ms=1.0,
                                               batch_size=2))
    client = AsyncClient()
    body = json.dumps({"model": "ranker", "query": "q", "texts": ["a", "b"]})
    headers = {"Authorization": f"Bearer {token}"}
    first = await client.post("/rerank", data=body, content_type="application/json", headers=headers)
    assert first.status_code == 200 and first["X-RateLimit-Remaining"] == "0"
    second = await client.post("/rerank", data=body, content_type="application/json", headers=headers)
    assert second.status_code == 429 and second.json()["error_type"] == "rate_limited"


def test_admin_creates_a_token_with_limits_and_priority(admin_client: Any) -> None:
    page = admin_client.get("/admin/models_registry/apitoken/add/")
    assert page.status_code == 200 and b"requests_per_minute" in page.content
    response = admin_client.post("/admin/models_registry/apitoken/add/", {
        "name": "from-admin", "requests_per_minute": "30", "tokens_per_minute": "", "tokens_per_day": "9000",
        "priority": "batch",
    }, follow=True)
    assert response.status_code == 200
    token = ApiToken.objects.get(name="from-admin")
    assert (token.requests_per_minute, token.tokens_per_minute, token.tokens_per_day) == (30, None, 9000)
    assert token.priority == "batch" and token.token_hash
    refused = admin_client.post("/admin/models_registry/apitoken/add/", {
        "name": "zero", "requests_per_minute": "0", "priority": "interactive"})
    assert refused.status_code == 200 and not ApiToken.objects.filter(name="zero").exists()
