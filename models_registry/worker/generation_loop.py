"""Continuous batching on the worker: text-generation requests join a running decode batch per model.

The batch loop hands this loop the batches it takes for a decoder model's text-generation,
streamed or answered whole (HF, TGI, OpenAI, batch-job lines); each request is read (checked,
its chat prompt rendered and tokenized) in the compute thread and
queued in the batch's one scheduler (inference.decode_scheduler), which decides when it joins.
`iterate` runs one token step per model in the compute thread and returns to the event
loop, which keeps receiving and heart-beating between steps; a request that finished,
stopped or whose client left is answered and its cache row freed at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from models_registry.capacity.batch_memory import BatchMemory
from models_registry.catalog.specs import AdapterSpec
from models_registry.core.batch_types import Batch, Item, ItemFailure, Key
from models_registry.core.errors import HostingError, Internal, TooLarge, Unavailable
from models_registry.inference import adapter_rows, generation_check
from models_registry.inference.adapter_cache import AdapterBudget
from models_registry.inference.containment import contained, describe
from models_registry.inference.generation_batch import GenerationBatch, Row
from models_registry.inference.streaming import decode_batch_only
from models_registry.worker.batcher import Batcher
from models_registry.worker.delivery import Delivery
from models_registry.worker.engine_stats import EngineStats
from models_registry.worker.model_slots import ModelSlot, ModelSlots
from models_registry.worker.replies import Replies
from models_registry.worker.token_streams import StreamSink, TokenStreams

logger = logging.getLogger(__name__)

TASK = "text-generation"
KV_COPIES = 2  # the cache takes at most half the memory batches may add (the rest: activations, other models)


@dataclass(eq=False)
class Waiting:
    """A request in the decode loop: its batcher item, its stream, its row once read."""

    item: Item[Delivery]
    sink: StreamSink | None
    row: Row
    since: float = field(default_factory=time.time)


@dataclass
class Running:
    """One model's decode batch and who waits for it (by row: the scheduler holds the rows)."""

    pipe: Any
    batch: GenerationBatch
    requests: dict[int, Waiting] = field(default_factory=dict)  # id(row) -> its request


class GenerationLoop:
    """The decode batches of one worker (every method on the event loop; compute in the compute thread)."""

    def __init__(self, batcher: Batcher[Delivery], slots: ModelSlots, replies: Replies, streams: TokenStreams,
                 memory: BatchMemory, compute: Callable[[Callable[[], Any]], Awaitable[Any]],
                 enabled: bool = True, stats: EngineStats | None = None,
                 adapters: AdapterBudget | None = None) -> None:
        self.batcher, self.slots, self.replies, self.streams = batcher, slots, replies, streams
        self.adapter_budget = adapters or AdapterBudget()  # the LoRA adapters each decode batch's model holds
        self.memory = memory
        self.stats = stats or EngineStats()  # its steps count as the worker's busy time, its answers as drained
        self.compute = compute
        self.enabled = enabled  # off: streamed generation in static batches (HOSTING_CONTINUOUS_BATCHING)
        self.running: dict[Key, Running] = {}

    def busy(self) -> bool:
        """Whether some request waits or decodes."""
        return any(r.batch.scheduler.busy() for r in self.running.values())

    def keys(self) -> list[Key]:
        """The models and tasks with a decode batch on the loaded model: their requests go to its scheduler as
        they come (one unloaded since takes the usual way, which loads it again)."""
        return [key for key, running in self.running.items() if self._pipe(key) is running.pipe]

    def split(self, batch: Batch[Delivery], slot: ModelSlot | None) -> tuple[Batch[Delivery] | None,
                                                                             Batch[Delivery] | None]:
        """(the items that belong in a decode batch: text-generation on a decoder model, streamed or not; the rest).

        slot: the batch's model, as the batch loop found it.
        """
        pipe = _slot_pipe(slot, batch.key[1]) if self.enabled else None
        if pipe is None or not generation_check.supports(pipe.model):
            return None, batch
        # A request redelivered after a worker died is computed alone, in the static path (worker.suspects).
        mine = [i for i in batch.items if not i.request.delivery.suspect]
        rest = [i for i in batch.items if i.request.delivery.suspect]
        # Logprobs, grammars and adapters are the decode batch's alone: such a request, redelivered, is told to
        # send again (a 503), not refused as though it asked for what this model does not serve (the static path's).
        unserved = [i for i in rest if _decode_batch_only(i.request.delivery)]
        if unserved:
            self._finish(batch.key, [(i, None, ItemFailure(Unavailable(
                "the worker generating this request went away; send the request again",
                headers={"Retry-After": "1"}))) for i in unserved])
            rest = [i for i in rest if not _decode_batch_only(i.request.delivery)]
        return (Batch(batch.key, mine, batch.reason) if mine else None,
                Batch(batch.key, rest, batch.reason) if rest else None)

    async def join(self, batch: Batch[Delivery]) -> None:
        """Read each request of batch (400s answered at once) and queue it for the next step."""
        pipe = self._pipe(batch.key)
        if pipe is None:
            self._finish(batch.key, [(i, None, ItemFailure(Unavailable("the model was unloaded"))) for i in batch.items])
            return
        running = self.running.get(batch.key)
        if running is None or running.pipe is not pipe:
            if running is not None:
                self._fail_all(batch.key, Unavailable("the model was reloaded; send the request again"))
            running = self.running[batch.key] = self._start(batch.key, pipe)
        sinks = self.streams.open(batch, every=True)  # a whole answer's is quiet: it stops when its client leaves
        model, task_name = batch.key
        spec = self.slots.get(model).spec  # type: ignore[union-attr]
        task = spec.tasks[task_name]
        # Each row's adapter as this worker's view lists it now; one removed since its intake keeps its name
        # and no source: its row fails (inference.adapter_cache), never runs on the base.
        adapters = [(spec.adapter_for(name) or AdapterSpec(name, "")) if (name := item.request.delivery.adapter)
                    else None for item in batch.items]

        def read() -> list[Row | HostingError]:
            rows: list[Row | HostingError] = []
            for item, sink, adapter in zip(batch.items, sinks, adapters):
                params = {**task.parameters, **item.request.delivery.parameters}
                try:
                    rows.append(running.batch.prepare(item.request.id, item.payload, params, sink,
                                                      waited_s=time.time() - item.request.arrival, adapter=adapter))
                except HostingError as error:
                    rows.append(error)
            return rows

        failed = []
        for item, sink, row in zip(batch.items, sinks, await self.compute(read)):
            if isinstance(row, HostingError):
                failed.append((item, sink, ItemFailure(row)))
                continue
            scheduler = running.batch.scheduler
            if not scheduler.fits_alone(row):
                failed.append((item, sink, ItemFailure(TooLarge(
                    f"the prompt and max_new_tokens need {row.tokens} tokens of KV cache; this worker's memory "
                    f"budget holds {scheduler.queue.token_budget}: lower max_new_tokens"))))
                continue
            running.requests[id(row)] = Waiting(item, sink, row)
            running.batch.add(row, item.request.arrival, item.request.priority, item.request.delivery.client)
        self._finish(batch.key, failed)

    def release_idle(self) -> float | None:
        """Idle decode batches give their cache back after a while; seconds until one may next (None: none idle)."""
        now = time.monotonic()
        asks = [at for at in (r.batch.release_idle(now) for r in self.running.values()) if at is not None]
        return max(0.0, min(asks) - now) if asks else None

    async def iterate(self) -> None:
        """One token step of every model with work (those that may join are prefilled first)."""
        now = time.time()
        for key, running in list(self.running.items()):
            for waiting in running.requests.values():
                sink = waiting.sink  # a whole answer past its deadline: its view has answered 504
                if sink is not None and sink.quiet and waiting.item.request.deadline <= now:
                    sink.cancel()
            if not running.batch.scheduler.busy():
                continue
            slot = self.slots.get(key[0])
            if slot is None or slot.loaded is None or self._pipe(key) is not running.pipe:
                self._fail_all(key, Unavailable("the model was unloaded; send the request again"))
                continue

            def step() -> list[tuple[Waiting, Any]]:
                # Every decision is the scheduler's: who yields, who joins, what each forward computes.
                return [(running.requests.pop(id(row)), row.answer()) for row in running.batch.step()]

            self.slots.touch(key[0])
            started = time.time()
            try:
                with self.slots.using(slot):
                    finished = await self.compute(step)
            except BaseException as error:
                if not contained(error):
                    raise
                logger.exception("decode step on %s failed", key)
                self._fail_all(key, Internal(f"generation failed: {describe(error)}"))
                continue
            self.stats.record_batch(key, len(finished), 0, time.time() - started)
            self._finish(key, [(w.item, w.sink, output) for w, output in finished])

    def _start(self, key: Key, pipe: Any) -> Running:
        rows = self.batcher.policy(key).max_batch_size
        kv_bytes = None
        if self.memory.enabled and self.memory.budget_bytes:
            kv_bytes = int(self.memory.available() // KV_COPIES)
        slot = self.slots.get(key[0])
        adapters = adapter_rows.cache_of(slot.loaded, TASK, self.adapter_budget) \
            if slot is not None and slot.loaded is not None else None
        batch = GenerationBatch(pipe, max_rows=rows, kv_bytes=kv_bytes, adapters=adapters)
        logger.info("decode batch for %s: up to %d rows, KV budget %s tokens", key, rows,
                    batch.scheduler.queue.token_budget or "unbounded")
        return Running(pipe=pipe, batch=batch)

    def _pipe(self, key: Key) -> Any:
        model, task_name = key
        return _slot_pipe(self.slots.get(model), task_name)

    def _fail_all(self, key: Key, error: HostingError) -> None:
        running = self.running.pop(key, None)
        if running is None:
            return
        self._finish(key, [(w.item, w.sink, ItemFailure(error)) for w in running.requests.values()])

    def _finish(self, key: Key, done: list[tuple[Item[Delivery], StreamSink | None, Any]]) -> None:
        """Answer requests that left the decode batch and close their streams."""
        for item, sink, output in done:
            # Its tokens first: the answer says how many token messages went before it (the view waits for them).
            sent = self.streams.close([sink])
            started = item.request.started_at or item.request.arrival
            finished = self.batcher.complete(Batch(key, [item], "decode"), [output])
            if finished:
                self.replies.batch(finished, started, time.time() - started, sent)


def _decode_batch_only(delivery: Delivery) -> bool:
    """Whether only the decode batch computes this request (logprobs, a grammar, an adapter)."""
    return bool(delivery.adapter) or decode_batch_only(delivery.parameters)


def _slot_pipe(slot: ModelSlot | None, task_name: str) -> Any:
    """The text-generation pipeline of slot's task_name, if the model is loaded and the task generates text."""
    if slot is None or slot.loaded is None:
        return None
    task = slot.spec.tasks.get(task_name)
    if task is None or task.task != TASK:
        return None
    return slot.loaded.pipelines.get(TASK)
