"""Poison quarantine against a real Redis: a message computing alone at a second worker death is answered 500."""

from __future__ import annotations

import asyncio
import time

import pytest

from models_registry.broker import messages
from models_registry.broker.layer import HostingChannelLayer
from models_registry.broker.work_layer import Pulled
from models_registry.models import QuarantinedRequest
from models_registry.worker import quarantine
from models_registry.worker.replies import Replies

WORK = messages.model_channel("m")


async def lease(layer: HostingChannelLayer, worker_id: str) -> list[Pulled]:
    """worker_id announces itself for a moment and leases what is on the channel."""
    await layer.announce(worker_id, 0.05)
    return await layer.pull([WORK], worker_id, 10)


async def die(layer: HostingChannelLayer) -> int:
    """The leasing worker dies (its liveness expires) and a live one recovers its messages."""
    await asyncio.sleep(0.1)
    return await layer.recover_dead_workers("live")


async def send(layer: HostingChannelLayer, request_id: str, reply: str = "specific.x!y") -> None:
    await layer.send(WORK, messages.WorkRequest(
        id=request_id, reply=reply, model="m", task="t", inputs=["x" * 10], parameters={},
        deadline=time.time() + 30).to_wire())


async def test_a_message_computing_alone_at_a_second_death_is_quarantined(layer: HostingChannelLayer) -> None:
    await send(layer, "poison")
    [(_, first, marked)] = await lease(layer, "w1")
    assert first["id"] == "poison" and not marked
    assert await die(layer) == 1
    assert await layer.take_poison() == []  # first death: delivered again, marked
    [((_, member), again, marked)] = await lease(layer, "w2")
    assert again["id"] == "poison" and marked
    await layer.mark_computing(WORK, "w2", member)  # computed alone, named first
    assert await die(layer) == 1
    assert await layer.pull([WORK], "w3", 10) == []  # never delivered again
    [message] = await layer.take_poison()
    assert message["id"] == "poison"
    assert await layer.take_poison() == []  # taken by one worker only


async def test_requests_leased_beside_poison_are_redelivered_not_quarantined(layer: HostingChannelLayer) -> None:
    await send(layer, "poison")
    await send(layer, "innocent")
    await lease(layer, "w1")
    assert await die(layer) == 2  # both were in flight: both marked
    pulled = {message["id"]: member for (_, member), message, _ in await lease(layer, "w2")}
    await layer.mark_computing(WORK, "w2", pulled["poison"])  # the innocent waits its turn
    assert await die(layer) == 2
    assert [m["id"] for m in await layer.take_poison()] == ["poison"]
    assert [(m["id"], marked) for _, m, marked in await layer.pull([WORK], "w3", 10)] == [("innocent", True)]


async def test_a_clean_exit_does_not_count_as_a_death(layer: HostingChannelLayer) -> None:
    await layer.send(WORK, {"type": "inference.request", "id": "calm"})
    for worker_id in ("w1", "w2", "w3"):
        await layer.announce(worker_id, 30)
        await layer.pull([WORK], worker_id, 10)
        assert await layer.retire(worker_id) == 1  # a drained SIGTERM gives it back
    assert await layer.take_poison() == []
    assert [m["id"] for _, m, _ in await layer.pull([WORK], "w4", 10)] == ["calm"]


@pytest.mark.django_db(transaction=True)
async def test_a_quarantined_request_is_answered_500_and_recorded(layer: HostingChannelLayer) -> None:
    reply = await layer.new_channel()
    answer = layer.expect_reply(reply)
    await layer.send(WORK, messages.WorkRequest(
        id="poison", reply=reply, model="m", task="t", inputs=["a", "bc"], parameters={},
        deadline=time.time() + 30).to_wire())
    await lease(layer, "w1")
    await die(layer)
    [((_, member), _, _)] = await lease(layer, "w2")
    await layer.mark_computing(WORK, "w2", member)
    await die(layer)
    assert await quarantine.answer_poison(layer, Replies(layer, "live")) == 1
    got = await asyncio.wait_for(answer, 3)
    assert got["error_type"] == "internal" and "two workers stopped" in got["error"]
    row = await QuarantinedRequest.objects.aget()
    assert (row.request_id, row.model, row.task, row.inputs) == ("poison", "m", "t", 2)
