"""Liveness from its own thread against a real Redis: a worker whose event loop is held up is not taken for dead."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from models_registry.broker import messages
from models_registry.broker.layer import HostingChannelLayer
from models_registry.worker.liveness import LivenessThread

WORK = messages.model_channel("m")


async def _leased(layer: HostingChannelLayer, worker_id: str) -> None:
    await layer.send(WORK, messages.WorkRequest(
        id="r", reply="specific.x!y", model="m", task="t", inputs=["x"], parameters={},
        deadline=time.time() + 30).to_wire())
    await layer.announce(worker_id, 0.6)
    assert len(await layer.pull([WORK], worker_id, 10)) == 1


async def test_a_worker_whose_loop_is_held_up_keeps_its_leases_and_its_heartbeat(layer: HostingChannelLayer) -> None:
    beats: list[Any] = []

    def beat(snapshot: Any) -> None:
        # Django refuses ORM calls where an event loop runs (SynchronousOnlyOperation): none may run here.
        beats.append((snapshot, asyncio.events._get_running_loop() is not None))

    liveness = LivenessThread(layer, "busy", ttl_s=0.6, heartbeat_s=0.2, hung_s=30, beat=beat)
    liveness.report(("state",))
    liveness.start()
    try:
        await _leased(layer, "busy")
        # The attack: the loop held for over three liveness lifetimes (a tokenizer on it, a long reply...).
        time.sleep(2.0)
        assert await layer.recover_dead_workers("other") == 0  # nothing requeued: it is alive
        assert len(beats) >= 5 and beats[-1] == (("state",), False)  # the heartbeat went on, with the last state
    finally:
        liveness.stop()


async def test_a_loop_silent_past_hung_s_is_let_die(layer: HostingChannelLayer, caplog: pytest.LogCaptureFixture) -> None:
    liveness = LivenessThread(layer, "hung", ttl_s=0.6, heartbeat_s=0.2, hung_s=0.5, beat=lambda _: None)
    liveness.report(("state",))
    liveness.start()
    try:
        await _leased(layer, "hung")
        with caplog.at_level(logging.ERROR):
            time.sleep(2.0)  # never reports again: hung
        assert await layer.recover_dead_workers("other") == 1  # its message goes back to the channel
        assert "no longer announced alive" in caplog.text
    finally:
        liveness.stop()
