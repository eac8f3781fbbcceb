"""The usage ledger: counted per token from the answers, flushed once however flushers die, read by its owner only."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.core.management import call_command
from django.test import Client

from models_registry.broker import deferred
from models_registry.models import LedgerFlush, RegisteredModel, UsageRecord
from models_registry.media import item as media_item
from models_registry.observe import ledger, ledger_flush
from tests.asgi_client import AsyncClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens", "broker", "calls")]


async def post(token: str, body: Any, path: str = "/models/cls") -> Any:
    return await AsyncClient().post(path, data=json.dumps(body), content_type="application/json",
                                    headers={"Authorization": f"Bearer {token}"})


async def usage(token: str, query: str = "") -> Any:
    return await AsyncClient().get(f"/v1/usage{query}", headers={"Authorization": f"Bearer {token}"})


def flush(broker: str, stale_s: float = 10.0) -> int:
    """One flusher round, as a web process' thread runs it."""
    return ledger_flush.flush(redis.Redis.from_url(broker), get_channel_layer().prefix, stale_s)


async def counted_and_flushed(broker: str) -> None:
    """Let the deferred writes of the last turn reach Redis, then flush them to the database."""
    while not deferred.writes.idle:
        await asyncio.sleep(0.005)
    await sync_to_async(flush)(broker)


@pytest.fixture
def two_tokens(make_model: Callable[..., RegisteredModel], make_token: Callable[..., str]) -> tuple[str, str]:
    make_model("cls")
    return make_token("team-a"), make_token("team-b")


async def test_each_token_reads_its_own_requests_tokens_and_errors(broker: str, two_tokens: tuple[str, str]) -> None:
    team_a, team_b = two_tokens
    for _ in range(3):
        assert (await post(team_a, {"inputs": "fine"})).status_code == 200
    assert (await post(team_b, {"inputs": ["one", "two"]})).status_code == 200
    assert (await post(team_b, {"inputs": "x", "parameters": {"no_such": 1}})).status_code == 400
    assert (await usage(team_a)).json() == {"object": "list", "data": []}  # counted in Redis, not flushed yet
    await counted_and_flushed(broker)

    mine = (await usage(team_a)).json()["data"]
    assert [(r["model"], r["requests"], r["input_tokens"], r["errors"]) for r in mine] == [("cls", 3, 21, 0)]
    assert mine[0]["compute_seconds"] == pytest.approx(3 * 0.002)  # the stub's 2 ms batches of one
    theirs = (await usage(team_b)).json()["data"]
    assert [(r["model"], r["requests"], r["input_tokens"], r["errors"]) for r in theirs] == [("cls", 2, 7, 1)]


async def test_group_by_and_the_range_select_rows(broker: str, two_tokens: tuple[str, str]) -> None:
    team_a, _ = two_tokens
    assert (await post(team_a, {"inputs": "fine"})).status_code == 200
    await counted_and_flushed(broker)
    rows = (await usage(team_a, "?group_by=hour,version")).json()["data"]
    assert len(rows) == 1 and rows[0]["end_time"] - rows[0]["start_time"] == 3600 and rows[0]["version"] == 0
    assert (await usage(team_a, "?group_by[]=hour&group_by[]=model")).json()["data"][0]["requests"] == 1
    later = rows[0]["end_time"]
    assert (await usage(team_a, f"?start_time={later}&end_time={later + 60}")).json()["data"] == []
    assert (await usage(team_a, f"?start_time={later}&end_time={later - 7200}")).json()["data"] == []
    refused = await usage(team_a, "?group_by=token")
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "group_by"
    assert (await usage(team_a, "?group_by=")).status_code == 400  # as the schema's pattern says
    assert (await usage(team_a, "?group_by=model,")).status_code == 400
    assert (await usage(team_a, "?start_time=soon")).status_code == 400
    assert (await usage(team_a, f"?end_time={2**70}")).status_code == 400  # no overflow in the database
    assert (await AsyncClient().get("/v1/usage")).status_code == 401


def test_a_flush_applied_twice_counts_once(broker: str, transactional_db: None) -> None:
    client, prefix = redis.Redis.from_url(broker), get_channel_layer().prefix
    client.hset(prefix + ledger.LIVE_KEY, mapping={"5|emb|2|3600|r": 4, "5|emb|2|3600|i": 40})
    assert flush(broker) == 1
    # The flusher committed and died before deleting its key: the key comes back as it was.
    flush_id = LedgerFlush.objects.get().flush_id
    client.hset(ledger_flush.flush_key(prefix, flush_id), mapping={"5|emb|2|3600|r": 4, "5|emb|2|3600|i": 40})
    client.zadd(ledger_flush.index_key(prefix), {flush_id: 0})
    assert flush(broker) == 0  # recognised by its id: dropped from Redis, nothing added
    assert not client.exists(ledger_flush.flush_key(prefix, flush_id))
    assert UsageRecord.objects.values_list("requests", "input_tokens").get() == (4, 40)


def test_a_flush_abandoned_before_its_commit_is_applied_by_the_next_round(broker: str, transactional_db: None) -> None:
    client, prefix = redis.Redis.from_url(broker), get_channel_layer().prefix
    client.hset(prefix + ledger.LIVE_KEY, mapping={"5|emb|0|7200|r": 2, "5|emb|0|7200|e": 1})
    # A flusher handed the counts off, then was killed before its transaction: its key and index entry stay.
    client.eval(ledger_flush.HANDOFF, 3, prefix + ledger.LIVE_KEY, ledger_flush.flush_key(prefix, "dead"),
                ledger_flush.index_key(prefix), "dead", time.time())
    client.hset(prefix + ledger.LIVE_KEY, "5|emb|0|7200|r", 1)  # counted after the hand-off
    assert flush(broker) == 1  # its own counts: "dead" may still be some live flusher's, for STALE_S
    assert UsageRecord.objects.values_list("requests", "errors").get() == (1, 0)
    assert flush(broker, stale_s=0) == 1  # stale now: taken over
    assert UsageRecord.objects.values_list("requests", "errors").get() == (3, 1)
    assert client.zcard(ledger_flush.index_key(prefix)) == 0 and not client.keys(f"{prefix}ledger*")


def test_counts_that_do_not_parse_are_left_out() -> None:
    rows = ledger.rows_of({b"1|m|0|0|r": b"2", b"1|m|0|0|zz": b"5", b"bad": b"1", b"x|m|0|0|r": b"1"})
    assert rows == {(1, "m", 0, 0): {"requests": 2}}


def test_media_inputs_count_images_and_audio_seconds() -> None:
    image = {"media": "image", "data": b"png", "width": 2, "height": 2}
    clip = {"media": "audio", "data": b"wav", "seconds": 2.5}
    counted = media_item.count(["text", image, clip, clip])
    assert (counted.items, counted.images, counted.audio_s) == (3, 1, 5.0)
    assert counted.tokens[0] is None and counted.tokens[1] == media_item.ESTIMATED_IMAGE_TOKENS
    written = ledger.fields(1, "m", 0, media=counted, now=0)
    assert (written["1|m|0|0|m"], written["1|m|0|0|a"]) == (1, 5000)


def _records() -> None:
    UsageRecord.objects.create(token_id=0, model="emb", version=1, hour=1_790_000_000 // 3600 * 3600, requests=5,
                               input_tokens=50, compute_us=1_500_000)
    UsageRecord.objects.create(token_id=0, model="gen", version=1, hour=1_790_000_000 // 3600 * 3600 + 3600,
                               requests=2, output_tokens=30, errors=1)


def test_the_admin_usage_page_charts_and_exports(admin_client: Client) -> None:
    _records()
    page = admin_client.get("/admin/models_registry/usagerecord/", {"start": "2026-09-20", "end": "2026-09-23",
                                                                      "by": "model"})
    assert page.status_code == 200
    html = page.content.decode()
    assert "<svg" in html and html.count("<rect") == 4 and "emb" in html and "gen" in html  # 4 days, no CDN
    assert "http" not in html.split('<svg', 1)[1].split("</svg>", 1)[0].replace("http://www.w3.org", "")
    exported = admin_client.get("/admin/models_registry/usagerecord/", {"start": "2026-09-20", "end": "2026-09-23",
                                                                          "format": "csv"})
    assert exported["Content-Type"].startswith("text/csv")
    lines = list(csv.DictReader(io.StringIO(exported.content.decode())))
    assert [(r["token"], r["model"], r["requests"], r["compute_seconds"]) for r in lines] == [
        ("(no token)", "emb", "5", "1.5"), ("(no token)", "gen", "2", "0.0")]


def test_usage_report_command_prints_csv() -> None:
    _records()
    out = io.StringIO()
    call_command("usage_report", "--since", "2026-09-01", "--csv", stdout=out)
    lines = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert [(r["model"], r["requests"], r["output_tokens"], r["errors"]) for r in lines] == [
        ("emb", "5", "0", "0"), ("gen", "2", "30", "1")]
    out = io.StringIO()
    call_command("usage_report", "--since", "2026-09-01", "--group-by", "model", stdout=out)
    assert "emb" in out.getvalue() and "gen" in out.getvalue()
