"""HostingChannelLayer against a real Redis: sends, leased pulls, releases, requeues, replies, limits."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from channels.exceptions import ChannelFull

from models_registry.broker.layer import HostingChannelLayer
from tests.admitting import admit

WORK = "inference.m"


def message(n: int) -> dict[str, object]:
    return {"type": "inference.request", "id": f"r{n}", "n": n}


async def inflight(layer: HostingChannelLayer, channel: str, worker_id: str) -> int:
    return int(await layer.connection(0).zcard(layer.inflight_key(channel, worker_id)))


async def test_pull_leases_messages_in_send_order_and_release_forgets_them(layer: HostingChannelLayer) -> None:
    for n in range(3):
        await layer.send(WORK, message(n))
    pulled = await layer.pull([WORK], "w1", 2)
    assert [(p.lease[0], p.message["n"], p.redelivered) for p in pulled] == [(WORK, 0, False), (WORK, 1, False)]
    assert await inflight(layer, WORK, "w1") == 2
    assert [m["n"] for _, m, _ in await layer.pull([WORK], "w2", 5)] == [2]
    assert await layer.pull([WORK], "w2", 5) == []
    await layer.release(WORK, "w1", [member for (_, member), _, _ in pulled])
    assert await inflight(layer, WORK, "w1") == 0


async def test_one_pull_takes_from_several_channels_in_their_order_up_to_its_count(layer: HostingChannelLayer) -> None:
    other = "inference.other"
    for n in range(2):
        await layer.send(WORK, message(n))
    for n in range(2, 5):
        await layer.send(other, message(n))
    pulled = await layer.pull([other, WORK], "w1", 4)  # the other channel first: it gives all 3, this one 1
    assert [(channel, m["n"]) for (channel, _), m, _ in pulled] == [(other, 2), (other, 3), (other, 4), (WORK, 0)]
    assert (await inflight(layer, other, "w1"), await inflight(layer, WORK, "w1")) == (3, 1)
    held = {raw.decode() for raw in await layer.connection(0).smembers(layer.worker_channels_key("w1"))}
    assert held == {other, WORK}  # both are requeued should w1 die
    await layer.announce("w1", 0.1)
    await asyncio.sleep(0.2)
    assert await layer.recover_dead_workers("w2") == 4
    # Those w1 held come marked as in flight at a death; 1, never pulled, does not.
    assert [(channel, m["n"], again) for (channel, _), m, again in await layer.pull([WORK, other], "w2", 10)] == [
        (WORK, 0, True), (WORK, 1, False), (other, 2, True), (other, 3, True), (other, 4, True)]


async def test_a_full_channel_refuses_the_send(make_layer: Callable[..., HostingChannelLayer]) -> None:
    layer = make_layer(capacity=2, expiry=60)
    await layer.send(WORK, message(1))
    await layer.send(WORK, message(2))
    with pytest.raises(ChannelFull):
        await layer.send(WORK, message(3))
    await layer.pull([WORK], "w1", 1)
    await layer.send(WORK, message(3))  # a pulled message frees its place


async def test_expired_messages_are_never_pulled(make_layer: Callable[..., HostingChannelLayer]) -> None:
    layer = make_layer(capacity=10, expiry=1)
    await layer.send(WORK, message(1))
    await asyncio.sleep(1.1)
    await layer.send(WORK, message(2))
    assert [m["n"] for _, m, _ in await layer.pull([WORK], "w1", 10)] == [2]


async def test_a_dead_workers_leases_go_back_to_the_channel(layer: HostingChannelLayer) -> None:
    await layer.announce("dead", 0.2)
    await layer.announce("alive", 30)
    for n in range(3):
        await layer.send(WORK, message(n))
    await layer.pull([WORK], "dead", 2)
    await layer.pull([WORK], "alive", 1)
    assert await layer.recover_dead_workers("other") == 0  # both still alive
    await asyncio.sleep(0.3)
    assert await layer.recover_dead_workers("other") == 2
    assert await inflight(layer, WORK, "dead") == 0
    assert await inflight(layer, WORK, "alive") == 1
    assert sorted(m["n"] for _, m, _ in await layer.pull([WORK], "other", 10)) == [0, 1]
    assert await layer.recover_dead_workers("other") == 0  # forgotten once recovered


async def test_retire_gives_back_what_the_worker_still_holds(layer: HostingChannelLayer) -> None:
    await layer.announce("w1", 30)
    await layer.send(WORK, message(1))
    await layer.pull([WORK], "w1", 1)
    assert await layer.retire("w1") == 1
    assert [m["n"] for _, m, _ in await layer.pull([WORK], "w2", 1)] == [1]


async def test_a_send_rings_the_doorbell_of_an_idle_worker(layer: HostingChannelLayer) -> None:
    started = time.monotonic()
    await layer.wait_for_work([WORK], 0.2)  # nothing sent: waits the timeout
    assert time.monotonic() - started >= 0.15
    waiting = asyncio.ensure_future(layer.wait_for_work([WORK], 5))
    await asyncio.sleep(0.05)
    await layer.send(WORK, message(1))
    await asyncio.wait_for(waiting, 1)


async def test_batched_replies_reach_the_futures_that_await_them(layer: HostingChannelLayer) -> None:
    channels = [await layer.new_channel() for _ in range(3)]
    futures = [layer.expect_reply(c) for c in channels]
    sent = await layer.send_replies([(c, {"type": "inference.result", "id": str(i)}) for i, c in enumerate(channels)])
    assert sent == 3
    replies = await asyncio.wait_for(asyncio.gather(*futures), 2)
    assert [r["id"] for r in replies] == ["0", "1", "2"]


async def test_a_reply_nobody_awaits_is_dropped_and_the_next_one_arrives(layer: HostingChannelLayer) -> None:
    gone, waiting = await layer.new_channel(), await layer.new_channel()
    layer.expect_reply(gone)
    layer.forget_reply(gone)  # the view gave up
    future = layer.expect_reply(waiting)
    await layer.send_replies([(gone, {"id": "late"}), (waiting, {"id": "wanted"})])
    assert (await asyncio.wait_for(future, 2))["id"] == "wanted"


async def test_replies_over_a_channels_capacity_are_counted_as_not_sent(
        make_layer: Callable[..., HostingChannelLayer]) -> None:
    layer = make_layer(capacity=1, expiry=60)
    channel = await layer.new_channel()
    assert await layer.send_replies([(channel, {"id": "a"}), (channel, {"id": "b"})]) == 1


async def test_a_pull_that_empties_the_channel_silences_its_doorbell(layer: HostingChannelLayer) -> None:
    for n in range(3):
        await layer.send(WORK, message(n))  # three rings
    assert len(await layer.pull([WORK], "w1", 10)) == 3
    started = time.monotonic()
    await layer.wait_for_work([WORK], 0.2)  # the rings of messages already taken do not wake it
    assert time.monotonic() - started >= 0.15


async def test_replies_release_their_leases_in_the_same_call(layer: HostingChannelLayer) -> None:
    for n in range(2):
        await layer.send(WORK, message(n))
    pulled = await layer.pull([WORK], "w1", 2)
    channels = [await layer.new_channel() for _ in pulled]
    futures = [layer.expect_reply(c) for c in channels]
    sent = await layer.send_replies([(c, {"id": str(i)}) for i, c in enumerate(channels)], "w1",
                                    [lease for lease, _, _ in pulled])
    assert sent == 2 and await inflight(layer, WORK, "w1") == 0
    assert [r["id"] for r in await asyncio.wait_for(asyncio.gather(*futures), 2)] == ["0", "1"]


async def test_replies_give_back_their_requests_admission_places(layer: HostingChannelLayer) -> None:
    from models_registry.broker import admission

    conn = layer.connection(0)
    for request_id, count in (("a", 3), ("b", 1), ("other", 2)):
        assert (await admit(layer, "m", "t", request_id, count, time.time() + 60, 100))[0]
    key = admission.pending_key(layer, "m", "t")
    channels = [await layer.new_channel() for _ in range(3)]
    futures = [layer.expect_reply(c) for c in channels]
    places = [admission.Places(key, "a", 3), admission.Places(key, "b", 1), None]
    sent = await layer.send_replies([(c, {"id": str(i)}) for i, c in enumerate(channels)], "w1", [], places)
    replies = await asyncio.wait_for(asyncio.gather(*futures), 2)
    assert sent == 3 and [r.get("left") for r in replies] == [1, 1, None]
    assert sorted(await conn.zrange(key, 0, -1)) == [b"other:0", b"other:1"]  # only the answered requests' places


async def test_a_view_gives_back_only_places_its_reply_did_not(layer: HostingChannelLayer,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The hand-off leaves the admission set itself only when the worker's reply did not say `left`."""
    from models_registry.broker import admission, handoff

    left: list[str] = []

    async def leave(layer: object, model: str, task: str, request_id: str, count: int) -> None:
        left.append(request_id)

    monkeypatch.setattr(handoff, "work_layer", lambda: layer)
    monkeypatch.setattr(admission, "leave", leave)

    async def worker(leaves: bool) -> None:
        pulled: list = []
        for _ in range(200):  # until the hand-off has sent it
            pulled = await layer.pull(["inference.m"], "w1", 1)
            if pulled:
                break
            await asyncio.sleep(0.01)
        (_, request, _), = pulled
        places = [admission.Places(admission.pending_key(layer, "m", "t"), request["id"], 1)] if leaves else None
        await layer.send_replies([(request["reply"], {"id": request["id"], "outputs": [1]})], "w1", [], places)

    for leaves in (True, False):
        result, _ = await asyncio.gather(
            handoff.infer(request_id="r", model="m", task="t", inputs=["x"], parameters={}, timeout_s=5,
                          max_queue_size=10), worker(leaves))
        assert result.outputs == [1]
        await asyncio.sleep(0.05)  # the hand-off's own leave runs in the background
        assert len(left) == (0 if leaves else 1)


async def test_the_layers_connections_pack_commands_with_hiredis(layer: HostingChannelLayer) -> None:
    from models_registry.broker.command_packing import packing_class
    from redis.asyncio.connection import Connection

    await layer.send(WORK, message(1))  # through a packing connection, as every command
    pool = layer.connection(0).connection_pool
    assert pool.connection_class.pack_command == packing_class(Connection).pack_command
    assert [p.message["n"] for p in await layer.pull([WORK], "w1", 1)] == [1]
