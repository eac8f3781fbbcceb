"""A channel layer over a ring of two Redis servers (two databases of one here): leases and requeues on both."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis

from models_registry.broker.layer import HostingChannelLayer
from tests.stack import Stack, with_database


@pytest.fixture
async def ring(flushed: str) -> AsyncIterator[HostingChannelLayer]:
    """A layer whose second server is another database of the test's Redis, emptied before and after."""
    current = int(flushed.rsplit("/", 1)[-1] or 0)
    db = min(set(range(1, 16)) - Stack._redis_dbs_in_use - {current})
    Stack._redis_dbs_in_use.add(db)
    second = with_database(flushed, db)
    client = redis.Redis.from_url(second)
    client.flushdb()
    layer = HostingChannelLayer(hosts=[{"address": flushed, "socket_timeout": None},
                                       {"address": second, "socket_timeout": None}], capacity=100, expiry=60)
    try:
        yield layer
    finally:
        await layer.close_pools()
        client.flushdb()
        client.close()
        Stack._redis_dbs_in_use.discard(db)


def channel_on(layer: HostingChannelLayer, server: int) -> str:
    """A work channel the ring puts on that server."""
    return next(f"inference.model-{n}" for n in range(1000) if layer._index(f"inference.model-{n}") == server)


async def test_a_dead_workers_leases_on_every_server_of_the_ring_go_back_to_their_channels(
        ring: HostingChannelLayer) -> None:
    first, second = channel_on(ring, 0), channel_on(ring, 1)
    await ring.announce("dead", 0.2)
    for channel in (first, second):
        await ring.send(channel, {"n": channel})
    assert len(await ring.pull([first, second], "dead", 10)) == 2
    await asyncio.sleep(0.3)
    assert await ring.recover_dead_workers("other") == 2
    taken = await ring.pull([first, second], "other", 10)
    assert sorted(message["n"] for _, message, _ in taken) == sorted([first, second])
    assert all(redelivered for _, _, redelivered in taken)  # each marked as in flight at a death
    assert await ring.recover_dead_workers("other") == 0  # forgotten once recovered


async def test_a_clean_exit_gives_back_what_it_holds_on_every_server(ring: HostingChannelLayer) -> None:
    first, second = channel_on(ring, 0), channel_on(ring, 1)
    await ring.announce("w1", 30)
    for channel in (first, second):
        await ring.send(channel, {"n": channel})
    await ring.pull([first, second], "w1", 10)
    assert await ring.retire("w1") == 2
    assert len(await ring.pull([first, second], "w2", 10)) == 2


async def test_an_idle_worker_wakes_for_a_message_on_any_server_of_the_ring(ring: HostingChannelLayer) -> None:
    first, second = channel_on(ring, 0), channel_on(ring, 1)
    for channel in (first, second):
        waiting = asyncio.ensure_future(ring.wait_for_work([first, second], 5.0))
        await asyncio.sleep(0.1)
        started = asyncio.get_running_loop().time()
        await ring.send(channel, {"n": channel})
        await asyncio.wait_for(waiting, 2.0)
        assert asyncio.get_running_loop().time() - started < 1.0  # its doorbell woke it, not the timeout
        assert len(await ring.pull([first, second], "w1", 10)) == 1
