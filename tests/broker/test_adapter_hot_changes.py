"""Issue 54's hot changes on one engine against a real Redis: a request for an adapter this worker does not list yet
waits for the refresh that lists it (no 503), the base's queued requests are answered and the base is not reloaded;
one still unlisted after worker.adapter_waits.WAIT_REFRESHES refreshes gets its 503."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

from models_registry.broker import messages
from models_registry.broker.layer import HostingChannelLayer
from models_registry.capacity.memory_budget import MemoryConfig
from models_registry.catalog.specs import AdapterSpec, ModelSpec, TaskSpec
from models_registry.core.batch_types import BatchPolicy
from models_registry.inference.adapter_cache import AdapterBudget
from models_registry.worker.adapter_waits import WAIT_REFRESHES
from models_registry.worker.engine import InferenceEngine
from models_registry.worker.pull_loop import PullLoop
from tests.admitting import admit
from tests.broker.test_engine import Loaded, until

CHANNEL = messages.model_channel("m")


class Runner:
    """Answers each input with the adapter that computed it ("base" for none); counts its loads."""

    default_device = "cpu"
    adapter_budget = AdapterBudget()  # the decode loop's, as ModelRunner's

    def __init__(self) -> None:
        self.loads = 0

    def load(self, spec: ModelSpec) -> Loaded:
        self.loads += 1
        return Loaded()

    def run(self, loaded: Loaded, task: TaskSpec, texts: list[Any], params: list[dict[str, Any]],
            adapters: list[AdapterSpec | None] | None = None) -> list[Any]:
        return [a.name if a is not None else "base" for a in adapters or [None] * len(texts)]


def spec(*adapters: str) -> ModelSpec:
    task = TaskSpec(name="t", task="text-classification", parameters={}, pooling="mean", normalize=False,
                    policy=BatchPolicy(max_batch_size=8, max_queue_size=100), timeout_s=10.0)
    return ModelSpec(name="m", source="stand-in", revision="", device="cpu", dtype="float32", enabled=True,
                     tasks={"t": task}, default_task="t",
                     adapters=tuple(AdapterSpec(name, f"/adapters/{name}") for name in adapters))


async def send(layer: HostingChannelLayer, loop: PullLoop, request_id: str, adapter: str = "") -> asyncio.Future[Any]:
    reply = await layer.new_channel()
    future = layer.expect_reply(reply)
    deadline = time.time() + 10
    await admit(layer, "m", "t", request_id, 1, deadline, 100)
    await layer.send(CHANNEL, messages.WorkRequest(id=request_id, reply=reply, model="m", task="t", inputs=["x"],
                                                   parameters={}, deadline=deadline, adapter=adapter).to_wire())
    loop.take(await layer.pull([CHANNEL], loop.engine.worker_id, 10))
    return future


async def test_a_new_adapters_first_request_waits_for_the_refresh_and_the_base_is_neither_failed_nor_reloaded(
        layer: HostingChannelLayer) -> None:
    runner = Runner()
    engine = InferenceEngine(layer, runner, memory=MemoryConfig(cap_batches=False))
    pull = PullLoop(layer, engine)
    batches = asyncio.ensure_future(engine.run_batches())
    try:
        await engine.reconcile({"m": spec()})
        await until(lambda: engine.ready_models() == ["m"])
        adapter_first = await send(layer, pull, "new", adapter="alpha")  # the web listed alpha before this worker
        base_first = await send(layer, pull, "base")
        assert (await asyncio.wait_for(base_first, 3))["outputs"] == ["base"]
        assert not adapter_first.done() and len(pull.waits) == 1
        await engine.reconcile({"m": spec("alpha")})  # the refresh that lists the base's first adapter
        pull.take_waiting()
        assert (await asyncio.wait_for(adapter_first, 3))["outputs"] == ["alpha"]
        await engine.reconcile({"m": spec("alpha", "beta")})
        await engine.reconcile({"m": replace(spec("beta"), adapters=(AdapterSpec("beta", "/elsewhere"),))})
        answers = [await send(layer, pull, "b2", adapter="beta"), await send(layer, pull, "base2")]
        assert [(await asyncio.wait_for(f, 3))["outputs"] for f in answers] == [["beta"], ["base"]]
        await engine.reconcile({"m": spec()})  # the last adapter removed
        assert (await asyncio.wait_for(await send(layer, pull, "base3"), 3))["outputs"] == ["base"]
        assert runner.loads == 1 and engine.models.stats.report("m")["loads"] == 1
    finally:
        batches.cancel()
        engine.shutdown()


async def test_an_adapter_still_unlisted_after_the_waited_refreshes_is_answered_503(layer: HostingChannelLayer) -> None:
    engine = InferenceEngine(layer, Runner(), memory=MemoryConfig(cap_batches=False))
    pull = PullLoop(layer, engine)
    try:
        await engine.reconcile({"m": spec()})
        await until(lambda: engine.ready_models() == ["m"])
        waiting = await send(layer, pull, "gone", adapter="removed")
        for _ in range(WAIT_REFRESHES - 1):
            await engine.reconcile({"m": spec()})
            pull.take_waiting()
            assert not waiting.done()
        await engine.reconcile({"m": spec()})
        pull.take_waiting()
        reply = await asyncio.wait_for(waiting, 3)
        assert reply["error_type"] == "unavailable" and "adapter 'removed'" in reply["error"]
        assert len(pull.waits) == 0
    finally:
        engine.shutdown()
