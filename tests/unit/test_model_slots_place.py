"""A worker's placement step around its awaits: a model chosen to make room that a request reaches meanwhile stays."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from models_registry.capacity.placement_plan import MIN_IDLE_S, Limits
from models_registry.catalog.specs import ModelSpec, TaskSpec
from models_registry.core.batch_types import BatchPolicy
from models_registry.core.model_state import ModelState
from models_registry.core.task_key import TaskKey
from models_registry.worker.batcher import Batcher
from models_registry.worker.model_slots import ModelSlot, ModelSlots


class _Replies:
    def __init__(self) -> None:
        self.failed: list[tuple[str, str]] = []

    def fail(self, requests: list[Any], why: str) -> None:
        self.failed += [(request.id, why) for request in requests]


def _spec(name: str) -> ModelSpec:
    task = TaskSpec(name="cls", task="text-classification", parameters={}, pooling="", normalize=False,
                    policy=BatchPolicy(), timeout_s=30.0, cache_ttl_s=0)
    return ModelSpec(name=name, source=f"/models/{name}", revision="", device="", dtype="auto", enabled=True,
                     tasks={"cls": task}, default_task="cls")


def _slots() -> tuple[ModelSlots, Batcher, _Replies]:
    batcher: Batcher = Batcher()
    replies = _Replies()
    slots = ModelSlots(runner=None, batcher=batcher, replies=replies, on_change=lambda: None,  # type: ignore[arg-type]
                       limits=Limits(max_loaded=1, model_bytes=0))
    slots.specs = {"a": _spec("a"), "b": _spec("b")}
    slots.slots["a"] = ModelSlot(spec=slots.specs["a"], state=ModelState.READY,
                                 last_used=time.time() - 10 * MIN_IDLE_S)
    batcher.set_policy(TaskKey("a", "cls"), BatchPolicy())
    return slots, batcher, replies


def test_a_request_that_reaches_the_model_to_evict_during_the_claim_keeps_it_loaded() -> None:
    slots, batcher, replies = _slots()

    async def claim(name: str, why: str) -> bool:
        assert (name, why) == ("b", "demand")
        batcher.submit(TaskKey("a", "cls"), "late", ["text"], [1], time.time(), time.time() + 30, delivery=None)
        await asyncio.sleep(0)  # the Redis round trip: the intake task runs meanwhile
        return True

    started = asyncio.run(slots.place({"b": 1}, {}, claim=claim))
    assert started == [] and "a" in slots.slots and replies.failed == []
    assert batcher.depth(TaskKey("a", "cls")) == 1


def test_an_idle_model_is_unloaded_for_a_model_in_demand() -> None:
    slots, batcher, replies = _slots()

    async def claim(name: str, why: str) -> bool:
        return True

    async def place() -> list[str]:
        started = await slots.place({"b": 1}, {}, claim=claim)
        slots.shutdown()
        return started

    assert asyncio.run(place()) == ["b"]
    assert "a" not in slots.slots and slots.slots["b"].state in (ModelState.LOADING, ModelState.ERROR)
