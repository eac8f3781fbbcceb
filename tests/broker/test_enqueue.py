"""broker.enqueue against a real Redis: a request is charged, admitted and sent in one script, or refused whole."""

from __future__ import annotations

import time

import pytest

from models_registry.broker import admission, enqueue
from models_registry.broker.layer import HostingChannelLayer
from models_registry.core.errors import RateLimited
from models_registry.policy import charges, rate_limits

WORK = "inference.m"
pytestmark = pytest.mark.usefixtures("within_one_minute")  # the limits count in one UTC minute


def places(layer: HostingChannelLayer, key: str, count: int, limit: int) -> enqueue.QueuePlaces:
    now = time.time()
    return enqueue.QueuePlaces(admission.pending_key(layer, "m", "t"), admission.members(key, count), now + 60, limit, now)


def plan(layer: HostingChannelLayer, limits: rate_limits.Limits, tokens: int) -> enqueue.ChargePlan:
    return rate_limits.plan(layer.prefix, 7, limits, tokens, time.time())


async def usage(layer: HostingChannelLayer) -> tuple[int, int]:
    minute = await layer.connection(0).hmget(rate_limits.usage_keys(layer.prefix, 7, time.time())[0], "r", "t")
    return int(minute[0] or 0), int(minute[1] or 0)


async def test_an_admitted_request_is_charged_queued_and_sent(layer: HostingChannelLayer) -> None:
    charge = plan(layer, rate_limits.Limits(requests_per_minute=5), 12)
    status, depth = await layer.enqueue(WORK, {"id": "a"}, places(layer, "a", 2, limit=4), charge)
    assert (status, depth) == (enqueue.DONE, 0)
    assert await usage(layer) == (1, 12)
    assert await admission.depth(layer, "m", "t") == 2
    assert [m["id"] for _, m, _ in await layer.pull([WORK], "w1", 5)] == ["a"]
    assert charges.outcome(charge, rate_limits.Limits(requests_per_minute=5), time.time()).tokens == 12


async def test_a_full_queue_refuses_whole_and_charges_the_request_but_not_its_tokens(
        layer: HostingChannelLayer) -> None:
    await layer.enqueue(WORK, {"id": "a"}, places(layer, "a", 3, limit=4), None)
    charge = plan(layer, rate_limits.Limits(), 12)
    status, depth = await layer.enqueue(WORK, {"id": "b"}, places(layer, "b", 2, limit=4), charge)
    assert (status, depth) == (enqueue.QUEUE_FULL, 3)
    assert await usage(layer) == (1, 0)
    assert await admission.depth(layer, "m", "t") == 3
    assert [m["id"] for _, m, _ in await layer.pull([WORK], "w1", 5)] == ["a"]  # b was never sent
    assert charges.outcome(charge, rate_limits.Limits(), time.time()).tokens == 0  # nothing to refund


async def test_a_spent_limit_refuses_before_anything_is_queued(layer: HostingChannelLayer) -> None:
    limits = rate_limits.Limits(requests_per_minute=1)
    await layer.enqueue(WORK, {"id": "a"}, places(layer, "a", 1, limit=10), plan(layer, limits, 3))
    charge = plan(layer, limits, 3)
    status, _ = await layer.enqueue(WORK, {"id": "b"}, places(layer, "b", 1, limit=10), charge)
    assert status == enqueue.RATE_REFUSED
    assert await usage(layer) == (1, 3) and await admission.depth(layer, "m", "t") == 1
    with pytest.raises(RateLimited) as refused:
        charges.outcome(charge, limits, time.time())
    assert refused.value.headers["Retry-After"]


async def test_a_refusal_marks_the_queue_known_full_and_an_admission_clears_it(layer: HostingChannelLayer) -> None:
    from models_registry.broker import handoff, queue_state
    from models_registry.core.errors import Overloaded

    async def send(key: str, count: int, limit: int, priority: str = "interactive") -> None:
        await handoff.enqueue_request(layer, "m", "t", WORK, {"id": key}, places(layer, key, count, limit=limit),
                                      0.0, priority, None)

    queue_state.reset()
    await send("a", 2, limit=2)
    assert queue_state.known_full("m", "t") is None  # full, but a place frees with any answer: no mark
    with pytest.raises(Overloaded):
        await send("b", 1, limit=1, priority="batch")
    assert queue_state.known_full("m", "t") is None  # batch traffic's limit is not the task's
    with pytest.raises(Overloaded) as refused:
        await send("c", 1, limit=2)
    assert refused.value.message == "m/t has 2 items queued (limit 2 for interactive traffic); retry in 1 s"
    mark = queue_state.known_full("m", "t")
    assert mark is not None and (mark.depth, mark.limit) == (2, 2)
    await admission.leave(layer, "m", "t", "a", 2)
    await send("d", 1, limit=2)
    assert queue_state.known_full("m", "t") is None
    queue_state.reset()
