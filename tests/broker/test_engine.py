"""The worker's engine against a real Redis, with a stand-in runner: leased messages in, one answer each out."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from models_registry.broker import messages
from models_registry.broker.layer import HostingChannelLayer
from models_registry.capacity.memory_budget import MemoryConfig
from models_registry.catalog.compute_cost import TokenCounter
from models_registry.catalog.specs import ModelSpec, TaskSpec
from models_registry.core.batch_types import BatchPolicy
from models_registry.inference.adapter_cache import AdapterBudget
from models_registry.worker.batch_loop import ABANDON_CHECK_AFTER_S
from models_registry.worker.engine import InferenceEngine
from models_registry.worker.pull_loop import PullLoop
from tests.admitting import admit

CHANNEL = messages.model_channel("m")


class Loaded:
    """What the runner loads: a device and a token count."""

    device = "cpu"

    def count_tokens(self, item: Any) -> int:
        return len(str(item).split())

    def count_inputs(self, task: str, inputs: list[Any]) -> tuple[list[Any], list[int]]:
        return inputs, [self.count_tokens(item) for item in inputs]

    def cost_counter(self) -> TokenCounter:
        return TokenCounter(lambda text: len(text.split()))


class Panic(BaseException):
    """What the tokenizers library raises from Rust (pyo3_runtime.PanicException is a BaseException)."""


class Runner:
    """Upper-cases its inputs and remembers every batch it ran."""

    default_device = "cpu"
    adapter_budget = AdapterBudget()  # the decode loop's, as ModelRunner's

    def __init__(self) -> None:
        self.batches: list[list[Any]] = []

    def load(self, spec: ModelSpec) -> Loaded:
        return Loaded()

    def run(self, loaded: Loaded, task: TaskSpec, texts: list[Any], params: list[dict[str, Any]]) -> list[Any]:
        self.batches.append(list(texts))
        if "panic" in texts:
            raise Panic("stride must be strictly less than max_len")
        return [str(t).upper() for t in texts]


def spec(enabled: bool = True, max_queue_size: int = 100) -> ModelSpec:
    task = TaskSpec(name="t", task="text-classification", parameters={}, pooling="mean", normalize=False,
                    policy=BatchPolicy(max_batch_size=8, max_queue_size=max_queue_size), timeout_s=10.0)
    return ModelSpec(name="m", source="stand-in", revision="", device="cpu", dtype="float32", enabled=enabled,
                     tasks={"t": task}, default_task="t")


async def until(check: Callable[[], bool], timeout_s: float = 3.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def no_leases_held(layer: HostingChannelLayer, engine: InferenceEngine, timeout_s: float = 3.0) -> None:
    deadline = time.monotonic() + timeout_s
    while await leases_held(layer, engine):
        assert time.monotonic() < deadline, "leases still held"
        await asyncio.sleep(0.01)


@pytest.fixture
async def engine(layer: HostingChannelLayer) -> AsyncIterator[InferenceEngine]:
    """An engine holding model m (task t, batches of 8, 100 queued items at most), its batch loop not started."""
    # No memory warm-up: these tests count the runner's batches (tests/unit/test_batch_memory.py covers it).
    engine = InferenceEngine(layer, Runner(), memory=MemoryConfig(cap_batches=False))
    await engine.reconcile({"m": spec()})
    await until(lambda: engine.ready_models() == ["m"])
    yield engine
    engine.shutdown()


Send = Callable[..., Awaitable[asyncio.Future[dict[str, Any]]]]


@pytest.fixture
def send(layer: HostingChannelLayer, engine: InferenceEngine) -> Send:
    """Send a request as a view does (admitted unless told not to), pull it as the worker does: its reply future."""

    async def send_one(request_id: str, inputs: list[Any], model: str = "m", admitted: bool = True
                       ) -> asyncio.Future[dict[str, Any]]:
        reply = await layer.new_channel()
        future = layer.expect_reply(reply)
        deadline = time.time() + 10
        if admitted:
            await admit(layer, model, "t", request_id, len(inputs), deadline, 100)
        await layer.send(CHANNEL, messages.WorkRequest(
            id=request_id, reply=reply, model=model, task="t", inputs=inputs, parameters={},
            deadline=deadline).to_wire())
        PullLoop(layer, engine).take(await layer.pull([CHANNEL], engine.worker_id, 10))
        return future

    return send_one


async def leases_held(layer: HostingChannelLayer, engine: InferenceEngine) -> int:
    return int(await layer.connection(0).zcard(layer.inflight_key(CHANNEL, engine.worker_id)))


async def test_requests_queued_together_run_as_one_batch_and_each_gets_its_answer(
        layer: HostingChannelLayer, engine: InferenceEngine, send: Send) -> None:
    futures = [await send("a", ["one", "two"]), await send("b", ["three"])]
    loop = asyncio.ensure_future(engine.run_batches())
    try:
        a, b = await asyncio.wait_for(asyncio.gather(*futures), 3)
    finally:
        loop.cancel()
    assert (a["id"], a["outputs"], a["batch_size"], a["worker"]) == ("a", ["ONE", "TWO"], 3, engine.worker_id)
    assert (b["id"], b["outputs"], b["error_type"]) == ("b", ["THREE"], None)
    assert engine.runner.batches == [["one", "two", "three"]]


async def test_answered_messages_give_their_leases_back(
        layer: HostingChannelLayer, engine: InferenceEngine, send: Send) -> None:
    future = await send("a", ["one"])
    assert await leases_held(layer, engine) == 1
    loop = asyncio.ensure_future(engine.run_batches())
    try:
        await asyncio.wait_for(future, 3)
        await no_leases_held(layer, engine)
    finally:
        loop.cancel()
    await engine.drain(1.0)
    assert engine.pending() == 0


async def test_a_full_queue_answers_429_with_retry_after(layer: HostingChannelLayer, engine: InferenceEngine,
                                                         send: Send) -> None:
    await engine.reconcile({"m": spec(max_queue_size=2)})
    first = await send("a", ["one", "two"])
    refused = await asyncio.wait_for(await send("b", ["three"]), 3)  # the batch loop is not running
    assert (refused["error_type"], refused["retry_after"]) == ("overloaded", "1")
    assert "is full (2/2 items)" in refused["error"]
    assert not first.done()
    assert engine.stats.rejected == 1


async def test_requests_whose_client_left_are_dropped_before_compute(
        layer: HostingChannelLayer, engine: InferenceEngine, send: Send) -> None:
    kept = await send("kept", ["one"])
    await send("gone", ["two"], admitted=False)  # no admission entry: its view has left
    await asyncio.sleep(ABANDON_CHECK_AFTER_S * 2)  # only requests that waited are checked
    loop = asyncio.ensure_future(engine.run_batches())
    try:
        assert (await asyncio.wait_for(kept, 3))["outputs"] == ["ONE"]
    finally:
        loop.cancel()
    assert engine.runner.batches == [["one"]]
    assert engine.stats.dropped == 1


async def test_a_model_this_worker_does_not_hold_is_answered_503(engine: InferenceEngine, send: Send) -> None:
    reply = await asyncio.wait_for(await send("a", ["one"], model="other"), 3)
    assert reply["error_type"] == "unavailable"
    assert "'other' is not served by this worker" in reply["error"]


async def test_disabling_the_model_answers_its_queued_requests_503(engine: InferenceEngine, send: Send) -> None:
    queued = await send("a", ["one"])
    await engine.reconcile({"m": spec(enabled=False)})
    reply = await asyncio.wait_for(queued, 3)
    assert (reply["error_type"], reply["error"]) == ("unavailable", "model m was disabled or changed")
    assert engine.ready_models() == []


async def test_a_malformed_message_is_dropped_and_its_lease_released(
        layer: HostingChannelLayer, engine: InferenceEngine) -> None:
    await layer.send(CHANNEL, {"type": "inference.request", "id": "x"})
    pulled = await layer.pull([CHANNEL], engine.worker_id, 10)
    assert await leases_held(layer, engine) == 1
    PullLoop(layer, engine).take(pulled)
    await no_leases_held(layer, engine)


async def test_a_batch_that_raises_a_base_exception_is_answered_500_and_the_loop_goes_on(
        layer: HostingChannelLayer, engine: InferenceEngine, send: Send, caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.ensure_future(engine.run_batches())
    try:
        failed = await asyncio.wait_for(await send("a", ["panic"]), 3)
        assert failed["error_type"] == "internal"
        # The client reads that it is internal and its request id; the exception's text is in the log only.
        assert failed["error"] == "internal error (request id a); the details are in the server log"
        assert "Panic: stride must be strictly less than max_len" in caplog.text
        assert not loop.done()
        after = await asyncio.wait_for(await send("b", ["one"]), 3)
        assert after["outputs"] == ["ONE"]
    finally:
        loop.cancel()
    await no_leases_held(layer, engine)


async def test_a_request_redelivered_after_a_worker_death_is_computed_alone_and_named_first(
        layer: HostingChannelLayer, engine: InferenceEngine) -> None:
    replies = []
    for request_id, text in (("suspect", "first"), ("other", "second")):
        reply = await layer.new_channel()
        replies.append(layer.expect_reply(reply))
        await layer.send(CHANNEL, messages.WorkRequest(
            id=request_id, reply=reply, model="m", task="t", inputs=[text], parameters={},
            deadline=time.time() + 10).to_wire())
        if request_id == "suspect":  # leased by a worker that dies: marked as in flight at a death
            await layer.announce("dead", 0.05)
            await layer.pull([CHANNEL], "dead", 10)
            await asyncio.sleep(0.1)
            assert await layer.recover_dead_workers("live") == 1
    digests = {}
    pulled = await layer.pull([CHANNEL], engine.worker_id, 10)
    for (_, member), message, _ in pulled:
        digests[message["id"]] = hashlib.sha1(member).hexdigest().encode()
    PullLoop(layer, engine).take(pulled)
    named: list[bytes | None] = []
    real_mark = layer.mark_computing

    async def mark(channel: str, worker_id: str, member: bytes | None) -> None:
        named.append(await layer.connection(0).get(layer.computing_key(worker_id)))
        await real_mark(channel, worker_id, member)

    layer.mark_computing = mark  # type: ignore[method-assign]  (to see the key as each run starts)
    loop = asyncio.ensure_future(engine.run_batches())
    try:
        answers = await asyncio.wait_for(asyncio.gather(*replies), 3)
    finally:
        loop.cancel()
    assert [a["outputs"] for a in answers] == [["FIRST"], ["SECOND"]]
    assert engine.runner.batches == [["first"], ["second"]]  # not batched together
    # Named before its run (the key held its digest until the run ended), cleared after it.
    assert named == [None, digests["suspect"]]
    assert await layer.connection(0).get(layer.computing_key(engine.worker_id)) is None


async def test_an_idle_decode_batch_is_asked_to_release_its_cache_at_every_turn_of_a_busy_loop(
        engine: InferenceEngine, send: Send) -> None:
    decoding = engine.batch_loop.decoding
    asked: list[float | None] = []
    real = decoding.release_idle

    def counted() -> float | None:
        asked.append(real())
        return asked[-1]

    decoding.release_idle = counted  # type: ignore[method-assign]
    seen: list[int] = []  # how often it had been asked when each batch ran
    run = engine.runner.run
    engine.runner.run = lambda *a: (seen.append(len(asked)), run(*a))[1]  # type: ignore[method-assign]
    futures = [await send(f"r{n}", [f"w{n}"] * 8) for n in range(4)]  # four full batches: the loop never sleeps
    loop = asyncio.ensure_future(engine.run_batches())
    try:
        await asyncio.wait_for(asyncio.gather(*futures), 3)
    finally:
        loop.cancel()
    assert len(seen) == 4 and all(b > a for a, b in zip(seen, seen[1:])), seen
