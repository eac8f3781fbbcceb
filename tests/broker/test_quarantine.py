"""Poison quarantine against a real Redis: a message in flight at two worker deaths is answered 500, never again."""

from __future__ import annotations

import asyncio
import time

import pytest

from models_registry.broker import messages
from models_registry.broker.layer import HostingChannelLayer
from models_registry.models import QuarantinedRequest
from models_registry.worker import quarantine
from models_registry.worker.replies import Replies

WORK = messages.model_channel("m")


async def die_holding(layer: HostingChannelLayer, worker_id: str) -> list[str]:
    """worker_id leases what is on the channel and dies (its liveness expires); the ids it held."""
    await layer.announce(worker_id, 0.05)
    held = [m["id"] for _, m in await layer.pull(WORK, worker_id, 10)]
    await asyncio.sleep(0.1)
    return held


async def test_a_message_is_redelivered_once_then_quarantined(layer: HostingChannelLayer) -> None:
    reply = await layer.new_channel()
    await layer.send(WORK, messages.request_message(
        request_id="poison", reply_channel=reply, model="m", task="t", inputs=["x" * 10], parameters={},
        deadline=time.time() + 30))
    assert await die_holding(layer, "w1") == ["poison"]
    assert await layer.recover_dead_workers("live") == 1
    assert await layer.take_poison() == []  # first death: delivered once more
    assert await die_holding(layer, "w2") == ["poison"]
    assert await layer.recover_dead_workers("live") == 1
    assert await layer.pull(WORK, "w3", 10) == []  # second death: never delivered again
    [message] = await layer.take_poison()
    assert message["id"] == "poison"
    assert await layer.take_poison() == []  # taken by one worker only


async def test_a_clean_exit_does_not_count_as_a_death(layer: HostingChannelLayer) -> None:
    await layer.send(WORK, {"type": "inference.request", "id": "calm"})
    for worker_id in ("w1", "w2", "w3"):
        await layer.announce(worker_id, 30)
        await layer.pull(WORK, worker_id, 10)
        assert await layer.retire(worker_id) == 1  # a drained SIGTERM gives it back
    assert await layer.take_poison() == []
    assert [m["id"] for _, m in await layer.pull(WORK, "w4", 10)] == ["calm"]


@pytest.mark.django_db(transaction=True)
async def test_a_quarantined_request_is_answered_500_and_recorded(layer: HostingChannelLayer) -> None:
    reply = await layer.new_channel()
    answer = layer.expect_reply(reply)
    await layer.send(WORK, messages.request_message(
        request_id="poison", reply_channel=reply, model="m", task="t", inputs=["a", "bc"], parameters={},
        deadline=time.time() + 30))
    for worker_id in ("w1", "w2"):
        await die_holding(layer, worker_id)
        await layer.recover_dead_workers("live")
    assert await quarantine.answer_poison(layer, Replies(layer, "live")) == 1
    got = await asyncio.wait_for(answer, 3)
    assert got["error_type"] == "internal" and "two workers stopped" in got["error"]
    row = await QuarantinedRequest.objects.aget()
    assert (row.request_id, row.model, row.task, row.inputs) == ("poison", "m", "t", 2)
