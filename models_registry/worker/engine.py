"""The worker's inference engine: the queues, the batch loop, replies and the models, put together.

One engine per `runworker` process. The pull loop (worker.pull_loop) queues what it pulls
and goes on at once; the batch loop forms batches with the pure Batcher, runs them in a
dedicated thread (one pipeline at a time on the device), and the replies send each
request its own answer.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from typing import Any

from models_registry.broker.work_layer import WorkLayer
from models_registry.capacity.batch_memory import BatchMemory
from models_registry.capacity.memory_budget import MemoryConfig, model_bytes, worker_budget
from models_registry.capacity.placement_plan import Limits
from models_registry.core.task_key import TaskKey
from models_registry.inference.backend import ModelRunner
from models_registry.observe import tracing
from models_registry.catalog.specs import ModelSpec
from models_registry.worker.batch_loop import BatchLoop
from models_registry.worker.batcher import Batcher
from models_registry.worker.delivery import Delivery
from models_registry.worker.engine_stats import BusyMeter, DrainRates, EngineStats, models_report
from models_registry.worker.media_intake import MediaDecoder
from models_registry.worker.model_slots import ModelSlots
from models_registry.worker.placer import Placer
from models_registry.worker.replies import Replies


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

    def ready_models(self) -> list[str]:
        """Models this worker can compute now."""
        return [slot.spec.name for slot in self.models.ready()]

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
        """Release the threads (models die with the process); the spans still waiting go to the exporter."""
        tracing.flush()
        self.batch_loop.shutdown()
        self.models.shutdown()
        self.media.shutdown()
