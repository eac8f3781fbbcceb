"""The worker's inference engine: intake, the batch loop, replies and the models, put together.

One engine per `runworker` process. The pull loop hands it messages and goes on at once;
the batch loop forms batches with the pure Batcher, runs them in a dedicated thread (one
pipeline at a time on the device), and the replies send each request its own answer.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from typing import Any

from models_registry.broker.messages import WorkRequest, model_channel
from models_registry.broker.work_layer import WorkLayer
from models_registry.capacity.batch_memory import BatchMemory
from models_registry.capacity.memory_budget import MemoryConfig, model_bytes, worker_budget
from models_registry.capacity.placement_plan import Limits
from models_registry.core.batch_types import QueueFull, UnknownKey
from models_registry.core.errors import HostingError, Internal, Overloaded, Unavailable
from models_registry.core.task_key import TaskKey
from models_registry.inference.backend import ModelRunner
from models_registry.inference.containment import contained, describe
from models_registry.catalog.specs import ModelSpec
from models_registry.worker.batch_loop import BatchLoop
from models_registry.worker.batcher import Batcher
from models_registry.worker.delivery import Delivery, Lease
from models_registry.worker.engine_stats import BusyMeter, DrainRates, EngineStats, models_report
from models_registry.worker.intake import (
    check_servable,
    check_token_budget,
    computed_tokens,
    readable,
)
from models_registry.worker.media_intake import MediaDecoder
from models_registry.worker.model_slots import ModelSlots
from models_registry.worker.placer import Placer
from models_registry.worker.replies import Replies

logger = logging.getLogger(__name__)


class InferenceEngine:
    """Owns the batcher, the loaded models and the compute thread of one worker."""

    def __init__(self, channel_layer: WorkLayer, runner: ModelRunner, serve_models: list[str] | None = None,
                 batch_aging_s: float = 5.0, memory: MemoryConfig | None = None) -> None:
        self.layer = channel_layer
        self.runner = runner
        memory = memory or MemoryConfig()
        self.memory = BatchMemory(worker_budget(memory.budget_bytes, runner.default_device), runner.default_device,
                                  enabled=memory.cap_batches)
        # No quiet time: the pull loop hands over everything waiting in Redis at once, so an
        # idle device has nothing more to wait for (an idle worker starts at once).
        self.batcher: Batcher[Delivery] = Batcher(idle_quiet_s=0.0, aging_s=batch_aging_s,
                               memory_limit=self.memory.allows if memory.cap_batches else None)
        self.stats = EngineStats()
        self.worker_id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.draining = False
        self.replies = Replies(channel_layer, self.worker_id)
        limits = Limits(memory.max_loaded, model_bytes(self.memory.budget_bytes, self.memory.resting_bytes))
        self.models = ModelSlots(runner, self.batcher, self.replies, self._wake, serve_models, self.memory, limits)
        self.placer = Placer(channel_layer, self.models, self.worker_id)
        self.batch_loop = BatchLoop(channel_layer, self.batcher, self.models, runner, self.replies, self.stats,
                                    self.memory)
        self.models.in_compute = self.batch_loop.in_compute_thread
        self._drain_rates = DrainRates(self.stats)
        self.busy = BusyMeter(self.stats)  # the heartbeat's busy_fraction
        self.media = MediaDecoder()

    def _wake(self) -> None:
        self.batch_loop.wake()

    def submit(self, message: dict[str, Any], lease: Lease | None = None) -> None:
        """Queue one request message (never blocks), or answer it at once with an error.

        lease is (channel, message as the layer holds it in this worker's in-flight set);
        it is released once the request is answered or dropped.
        """
        request = WorkRequest.from_wire(message)
        if request is None:
            logger.warning("dropped a malformed inference message: %.200r", message)
            self.replies.release(lease)
            return
        key = TaskKey(request.model, request.task)
        if self.models.on_demand(request.model) and not self.draining:
            self._send_back(request.model, message, lease)  # unloaded (or reloading) while it was pulled: it waits for a holder
            return
        try:
            slot = check_servable(request, self.models.get(request.model), self.draining)
            request = readable(request, slot)  # a 1 MB text costs what the model's length costs
            kind = slot.spec.tasks[request.task].task
            # Each text is tokenized once, here: the forward reuses the ids (inference.intake_tokens).
            inputs, costs = slot.loaded.count_inputs(kind, request.inputs)
            charged = computed_tokens(request, slot, costs)  # what is charged: what the model will compute
            check_token_budget(charged, slot.spec.tasks[request.task].max_request_tokens)
            payloads = self.media.prepare(slot.loaded, kind, inputs)
            self.batcher.submit(
                key, request.id, payloads, costs, time.time(), request.deadline,
                delivery=Delivery(reply=request.reply, parameters=request.parameters, lease=lease, tokens=charged,
                                  suspect=request.redelivered, client=request.client, trace=request.trace),
                priority=request.priority,
            )
        except QueueFull as full:
            self.stats.rejected += 1
            self.replies.error(request.id, request.reply, Overloaded(
                f"queue of {key} is full ({full.depth}/{full.limit} items); retry later",
                headers={"Retry-After": "1"},
            ), lease)
            return
        except UnknownKey:
            self.replies.error(request.id, request.reply,
                               Unavailable(f"{key} is not served by this worker"), lease)
            return
        except HostingError as error:
            self.replies.error(request.id, request.reply, error, lease)
            return
        except BaseException as error:  # a tokenizer panic while counting: this request's 500, not the worker's end
            if not contained(error):
                raise
            logger.exception("could not queue request %s", request.id)
            self.replies.error(request.id, request.reply, Internal(f"could not read this request: {describe(error)}"),
                               lease)
            return
        self._wake()

    def _send_back(self, model: str, message: dict[str, Any], lease: Lease | None) -> None:
        async def send_back() -> None:
            try:
                await self.layer.send(model_channel(model), message)
            except Exception:
                logger.exception("could not send a message back to its channel; its lease requeues it")
                return
            self.replies.release(lease)

        asyncio.ensure_future(send_back())

    def ready_models(self) -> list[str]:
        """Models this worker can compute now."""
        return [slot.spec.name for slot in self.models.ready()]

    def room(self) -> int:
        """How many more messages this worker should take now: no hoarding.

        Two batches' worth per task: enough to form the next batch while one computes,
        and the rest stays in Redis for other workers.
        """
        if self.draining:
            return 0
        sizes = [t.policy.max_batch_size for s in self.models.ready() for t in s.spec.tasks.values()]
        limit = max(8, 2 * max(sizes, default=4))
        return max(0, limit - sum(self.batcher.depths().values()))

    async def wait_for_room(self, timeout_s: float) -> None:
        """Until a batch has been taken from the queues (or timeout_s)."""
        await self.batch_loop.wait_for_room(timeout_s)

    async def run_batches(self) -> None:
        """Form and run batches forever: at once when idle, never two at a time."""
        await self.batch_loop.run()

    def wanted(self, spec: ModelSpec) -> bool:
        """Whether this worker should hold the model."""
        return self.models.wanted(spec)

    async def reconcile(self, specs: dict[str, ModelSpec]) -> None:
        """Bring loaded models and queue settings in line with the registry."""
        await self.models.reconcile(specs)

    def models_state(self) -> dict[str, dict[str, Any]]:
        """{model: {state, error, device, tasks, drain_rates, served}} for the heartbeat."""
        return models_report(self.models, self.stats, self.drain_rates())

    def queue_depths(self) -> dict[str, int]:
        """{"model/task": waiting items} for the heartbeat."""
        return {str(TaskKey(*key)): depth for key, depth in self.batcher.depths().items()}

    def drain_rates(self) -> dict[str, float]:
        """Items answered per second per "model/task" since the previous call (heartbeat)."""
        return self._drain_rates.current()

    def pending(self) -> int:
        """Items waiting or computing, and replies still being sent."""
        return sum(self.batcher.depths().values()) + (1 if self.batch_loop.busy else 0) + self.replies.pending()

    async def drain(self, timeout_s: float) -> None:
        """Stop taking work and wait (bounded) until what is held has been answered."""
        self.draining = True
        deadline = time.time() + timeout_s
        while self.pending() and time.time() < deadline:
            await asyncio.sleep(0.05)

    def shutdown(self) -> None:
        """Release the threads (models die with the process)."""
        self.batch_loop.shutdown()
        self.models.shutdown()
        self.media.shutdown()
