"""The batch loop: forms batches with the pure Batcher and computes them one at a time in a dedicated thread."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from models_registry.broker import admission
from models_registry.broker.work_layer import WorkLayer
from models_registry.capacity.batch_memory import BatchMemory
from models_registry.catalog.specs import AdapterSpec
from models_registry.core.batch_types import Batch, ItemFailure
from models_registry.core.conf import conf
from models_registry.core.errors import Internal, Unavailable
from models_registry.inference.backend import ModelRunner
from models_registry.inference.compute_deadline import computing_until
from models_registry.inference.containment import contained, describe
from models_registry.observe import tracing
from models_registry.worker import batch_spans, suspects
from models_registry.worker.batcher import Batcher
from models_registry.worker.generation_loop import GenerationLoop
from models_registry.worker.delivery import Delivery
from models_registry.worker.engine_stats import EngineStats
from models_registry.worker.model_slots import ModelSlot, ModelSlots
from models_registry.worker.replies import Replies
from models_registry.worker.token_streams import TokenStreams
from models_registry.core.waits import event_set

logger = logging.getLogger(__name__)

# Only requests that waited this long can have been abandoned: fresh ones skip the round
# trip to Redis (a client that left within this window costs one small compute).
ABANDON_CHECK_AFTER_S = 0.05


class BatchLoop:
    """Runs forever: a batch at once when the device is idle, never two at a time."""

    def __init__(self, layer: WorkLayer, batcher: Batcher[Delivery], slots: ModelSlots, runner: ModelRunner,
                 replies: Replies, stats: EngineStats, memory: BatchMemory | None = None) -> None:
        self.layer = layer
        self.batcher = batcher
        self.slots = slots
        self.runner = runner
        self.replies = replies
        self.stats = stats
        self.busy = False
        self.memory = memory or BatchMemory(0, enabled=False)  # sizes batches to the memory budget
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._compute = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compute")
        self.streams = TokenStreams(layer)
        # Text-generation on decoder models joins a running batch per token step (worker.generation_loop).
        self.decoding = GenerationLoop(batcher, slots, replies, self.streams, self.memory, self.in_compute_thread,
                                   enabled=conf.CONTINUOUS_BATCHING, stats=stats, adapters=runner.adapter_budget)

    def wake(self) -> None:
        """Look at the queues again now (new work, or new policies)."""
        self._wake.set()

    async def wait_for_room(self, timeout_s: float) -> None:
        """Until a batch has been taken from the queues (or timeout_s)."""
        self._room.clear()
        await event_set(self._room, timeout_s)

    async def in_compute_thread(self, work: Callable[[], Any]) -> Any:
        """Run work in the compute thread, between batches (a new model's warm-up batches)."""
        return await asyncio.get_running_loop().run_in_executor(self._compute, work)

    def shutdown(self) -> None:
        """Release the compute thread."""
        self._compute.shutdown(wait=False, cancel_futures=True)

    async def run(self) -> None:
        """Form and run batches forever."""
        loop = asyncio.get_running_loop()
        while True:
            now = time.time()
            # Every turn, not only before a sleep: other models' batches may keep the loop from ever sleeping,
            # and an idle decode batch must still give its cache back.
            release_in = self.decoding.release_idle()
            expired = self.batcher.drop_expired(now)
            self.stats.expired += len(expired)  # their views answer 504 by themselves
            for request in expired:
                self.replies.release(request.delivery.lease)
            if expired:
                logger.info("dropped %d expired request(s) before compute", len(expired))
            await self._hand_over_generation(now)
            batch = self.batcher.next_batch(now, idle=True)
            formed = time.time()
            if batch is not None:
                self._room.set()
                slot = self.slots.touch(batch.key[0])  # just used: not evicted before it computes
                batch = await self._without_abandoned(batch)
                if not batch.items:
                    continue
                decoded, batch = self.decoding.split(batch, slot)
                if decoded is not None:
                    await self.decoding.join(decoded)  # they join the running decode batch at the next step
                if batch is None:
                    continue
            if batch is None:
                if self.decoding.busy():
                    self.busy = True
                    await self.decoding.iterate()  # one token step, then the queues again
                    self.busy = self.decoding.busy()
                    continue
                await self._sleep_until_work(now, release_in)
                continue
            self.busy = True
            started = time.time()
            sinks = self.streams.open(batch)
            sent: dict[str, int] = {}
            try:
                outputs = await self._computed(loop, batch, sinks, slot)
            except BaseException as error:  # the runner isolates per-input errors; this guards the worker's life
                if not contained(error):
                    raise
                logger.exception("batch on %s failed", batch.key)
                outputs = [ItemFailure(Internal(f"batch failed: {describe(error)}"))] * len(batch)
            finally:
                self.busy = False
                sent = self.streams.close(sinks)  # the answers say how many token messages went before them
            compute_s = time.time() - started
            self.stats.record_batch(batch.key, len(batch), sum(item.cost for item in batch.items), compute_s)
            logger.debug("batch %s size=%d reason=%s compute=%.1fms", batch.key, len(batch), batch.reason, compute_s * 1e3)
            traced = batch_spans.BatchTrace() if tracing.tracer is not None and any(
                [item.request.delivery.traceparent for item in batch.items]) else None
            finished = self.batcher.complete(batch, outputs)
            if finished:
                self.replies.batch(finished, started, compute_s, sent, traced)
            if traced is not None:  # the replies' task runs first: they are on their way before the spans are made
                loop.call_soon(self._trace, traced, batch, formed, started, started + compute_s)

    async def _hand_over_generation(self, now: float) -> None:
        """Requests for a running decode batch go to its scheduler at once: there they wait in one queue.

        (A redelivered one stays for the static path: worker.suspects.)
        """
        for key in self.decoding.keys():
            handed = self.batcher.hand_over(key, now, lambda item: not item.request.delivery.suspect)
            if handed is None:
                continue
            self._room.set()
            self.slots.touch(key[0])
            handed = await self._without_abandoned(handed)
            if handed.items:
                await self.decoding.join(handed)

    async def _computed(self, loop: asyncio.AbstractEventLoop, batch: Batch[Delivery], sinks: list[Any],
                        slot: ModelSlot | None) -> list[Any]:
        """The batch's outputs in item order, computed part by part (worker.suspects: a redelivered item alone,
        named computing around it, then the rest together) in the compute thread."""
        outputs: list[Any] = [None] * len(batch.items)
        for part in suspects.parts(batch, sinks):
            if part.named is not None:
                await self._name_computing(part.named[0], part.named[1])
            computed = await loop.run_in_executor(self._compute, self._run_batch, part.batch, part.sinks, slot)
            if part.named is not None:
                await self._name_computing(part.named[0], None)
            for position, output in zip(part.positions, computed):
                outputs[position] = output
        return outputs

    async def _name_computing(self, channel: str, member: bytes | None) -> None:
        """Name the redelivered message computed alone now (None: none) for the requeue at this worker's death."""
        try:
            await self.layer.mark_computing(channel, self.replies.worker_id, member)
        except Exception as error:  # broker away: nothing could be requeued either, compute anyway
            if member is not None:  # a stale name is harmless: that message is answered and released
                logger.warning("could not name the redelivered request computing now: %s", error)

    def _trace(self, traced: batch_spans.BatchTrace, batch: Batch[Delivery], formed: float, started: float,
               ended: float) -> None:
        """The batch's spans (worker.batch_spans): each request's queue time, the batch linked to them, the forward;
        traced.context the batch span's (None: no request of it had spans)."""
        loaded = getattr(self.slots.get(batch.key[0]), "loaded", None)
        where = (loaded.device, (loaded.backend or {}).get("backend", "")) if loaded is not None else ("", "")
        # A request's items share its trace: one queue span and one link a request.
        requests = {item.request.id: (item.request.delivery.traceparent, item.request.delivery.tracestate,
                                      item.request.arrival) for item in batch.items}
        batch_spans.record_batch(traced, list(requests.values()), formed, started, ended, {
            "hosting.model": batch.key[0], "hosting.task": batch.key[1], "hosting.batch.size": len(batch.items),
            "hosting.batch.requests": len(requests), "hosting.batch.reason": str(batch.reason),
            "hosting.batch.tokens": sum([item.cost for item in batch.items]),
            "hosting.batch.padded_tokens": batch.padded_tokens, "hosting.device": where[0],
            "hosting.backend": str(where[1])})

    async def _sleep_until_work(self, now: float, release_in: float | None) -> None:
        """Until a request comes, the batcher's next deadline, or an idle decode batch's release (release_in s)."""
        wake_at = self.batcher.next_wakeup(now)
        timeout = None if wake_at is None else max(0.0, wake_at - time.time())
        if release_in is not None:
            timeout = release_in if timeout is None else min(timeout, release_in)
        self._wake.clear()
        await event_set(self._wake, timeout)

    async def _without_abandoned(self, batch: Batch[Delivery]) -> Batch[Delivery]:
        """Drop items whose client has gone (timed out, disconnected) before computing them."""
        model, task = batch.key
        now = time.time()
        ids = list({item.request.id for item in batch.items if now - item.request.arrival > ABANDON_CHECK_AFTER_S})
        if not ids:
            return batch
        try:
            wanted = await admission.still_wanted(self.layer, model, task, ids)
        except Exception:
            return batch  # broker trouble: compute rather than risk dropping live requests
        if len(wanted) == len(ids):
            return batch
        gone = set(ids) - wanted
        for item in batch.items:
            request = item.request
            if request.id in gone and not request.done:
                request.done = True
                self.stats.dropped += 1
                self.replies.release(request.delivery.lease)
        kept = [item for item in batch.items if item.request.id not in gone]
        logger.info("dropped %d item(s) of %s/%s: client gone before compute", len(batch.items) - len(kept), model, task)
        batch.items = kept
        return batch

    def _run_batch(self, batch: Batch[Delivery], sinks: list[Any], slot: ModelSlot | None) -> list[Any]:
        """The batch's outputs, computed on slot (its model as the batch loop found it), in the compute thread."""
        model, task_name = batch.key
        if slot is None or slot.loaded is None or task_name not in slot.spec.tasks:
            return [ItemFailure(Unavailable(f"model {model!r} was unloaded"))] * len(batch)
        task = slot.spec.tasks[task_name]
        texts = [item.payload for item in batch.items]
        params = [{**task.parameters, **item.request.delivery.parameters} for item in batch.items]
        # Past the latest deadline of the batch nobody waits for it: generation and long runs stop there.
        # A stream's deadline is pushed forward while its client listens: its sink stops it instead.
        deadline = None if any(sinks) else max(item.request.deadline for item in batch.items)
        costs = [item.cost for item in batch.items]
        # Each row's adapter, as the slot's registry view lists it now (None: the base); rows of several
        # adapters and of the base share the batch's forwards (inference.batched_lora).
        # One removed since its intake keeps its name and no source: its rows fail, never run on the base.
        adapters = [(slot.spec.adapter_for(name) or AdapterSpec(name, "")) if (name := item.request.delivery.adapter)
                    else None for item in batch.items]
        with computing_until(deadline), self.slots.using(slot):  # not evicted while it computes
            if any(sinks):  # streamed generation: each such item's tokens go to its client as they come
                return self.runner.run(slot.loaded, task, texts, params, sinks=sinks, adapters=adapters)
            if any(adapters):
                return self.memory.run(batch.key, costs, lambda at: self.runner.run(
                    slot.loaded, task, [texts[p] for p in at], [params[p] for p in at],
                    adapters=[adapters[p] for p in at]))
            return self.memory.run(batch.key, costs, lambda at: self.runner.run(
                slot.loaded, task, [texts[p] for p in at], [params[p] for p in at]))
