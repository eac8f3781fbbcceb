"""Loading on demand against a real Redis: one model at a time on a worker, the other evicted when asked for."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from models_registry.broker import messages, model_holders
from models_registry.broker.layer import HostingChannelLayer
from models_registry.capacity.memory_budget import MemoryConfig
from models_registry.capacity.placement_plan import MIN_IDLE_S
from models_registry.catalog.specs import ModelSpec, TaskSpec
from models_registry.core.batch_types import BatchPolicy
from models_registry.inference.adapter_cache import AdapterBudget
from models_registry.worker.engine import InferenceEngine
from models_registry.worker.pull_loop import PullLoop


class Loaded:
    device = "cpu"
    backend = {"backend": "torch"}

    def count_tokens(self, item: Any) -> int:
        return len(str(item).split())

    def count_inputs(self, task: str, inputs: list[Any]) -> tuple[list[Any], list[int]]:
        return inputs, [self.count_tokens(item) for item in inputs]


class Runner:
    """Loads anything, answers upper-cased inputs."""

    default_device = "cpu"
    adapter_budget = AdapterBudget()  # the decode loop's, as ModelRunner's

    def load(self, spec: ModelSpec) -> Loaded:
        return Loaded()

    def run(self, loaded: Loaded, task: TaskSpec, texts: list[Any], params: list[dict[str, Any]]) -> list[Any]:
        return [str(t).upper() for t in texts]


def spec(name: str, keep_loaded: bool = False) -> ModelSpec:
    task = TaskSpec(name="t", task="text-classification", parameters={}, pooling="mean", normalize=False,
                    policy=BatchPolicy(max_batch_size=8), timeout_s=10.0)
    return ModelSpec(name=name, source="stand-in", revision="", device="cpu", dtype="float32", enabled=True,
                     tasks={"t": task}, default_task="t", keep_loaded=keep_loaded)


async def until(check: Callable[[], bool], tick: Callable[[], Any], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await tick()
        await asyncio.sleep(0.05)


async def test_a_request_for_a_cold_model_evicts_the_idle_one_and_is_answered(layer: HostingChannelLayer) -> None:
    engine = InferenceEngine(layer, Runner(), memory=MemoryConfig(cap_batches=False, max_loaded=1))
    batches = asyncio.ensure_future(engine.run_batches())
    try:
        await engine.reconcile({"a": spec("a"), "b": spec("b")})
        await until(lambda: engine.ready_models() == ["a"], engine.placer.tick)  # preloaded: nobody holds it
        await engine.placer.tick()  # says so in Redis
        assert await model_holders.survey(layer, "someone-else", ["a", "b"]) == ({"a": 0, "b": 0}, {"a": 1, "b": 0})
        assert engine.models_state()["b"]["state"] == "available"

        reply = await layer.new_channel()
        answer = layer.expect_reply(reply)
        await layer.send(messages.model_channel("b"), messages.WorkRequest(
            id="r1", reply=reply, model="b", task="t", inputs=["hello"], parameters={},
            deadline=time.time() + 10).to_wire())
        await asyncio.sleep(MIN_IDLE_S)  # a just-used model is not evicted

        async def tick_and_pull() -> None:
            await engine.placer.tick()
            PullLoop(layer, engine).take(await layer.pull([messages.model_channel("b")], engine.worker_id, 10))

        await until(lambda: answer.done(), tick_and_pull)  # pulled early too: sent back until b is ready
        assert answer.result()["outputs"] == ["HELLO"], answer.result()
        assert engine.ready_models() == ["b"]
        report = engine.models_state()
        assert (report["a"]["state"], report["a"]["evictions"], report["b"]["loads"]) == ("available", 1, 1)
        assert report["b"]["loaded_why"] == "demand" and report["b"]["on_demand"]
        await engine.placer.tick()
        assert (await model_holders.survey(layer, "someone-else", ["a", "b"]))[1] == {"a": 0, "b": 1}
    finally:
        batches.cancel()
        engine.shutdown()


async def test_a_pinned_model_is_never_evicted(layer: HostingChannelLayer) -> None:
    engine = InferenceEngine(layer, Runner(), memory=MemoryConfig(cap_batches=False, max_loaded=1))
    try:
        await engine.reconcile({"pinned": spec("pinned", keep_loaded=True), "b": spec("b")})
        await until(lambda: engine.ready_models() == ["pinned"], engine.placer.tick)
        await layer.send(messages.model_channel("b"), messages.WorkRequest(
            id="r2", reply="x", model="b", task="t", inputs=["hi"], parameters={},
            deadline=time.time() + 10).to_wire())
        await asyncio.sleep(MIN_IDLE_S)
        for _ in range(3):
            await engine.placer.tick()
        assert engine.ready_models() == ["pinned"] and engine.models.get("b") is None
    finally:
        engine.shutdown()
