"""The `runworker inference` process: the engine, its pull loop and batch loop, liveness and reporting."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import sync_to_async
from channels.worker import Worker
from django.utils.module_loading import import_string

from models_registry.broker.work_layer import WorkLayer, require_work_layer
from models_registry.capacity.memory_budget import MemoryConfig
from models_registry.core.conf import conf
from models_registry.catalog import heartbeats, version_changes
from models_registry.catalog.rollout import ready_everywhere
from models_registry.catalog.specs import read_specs, worker_specs
from models_registry.worker import quarantine
from models_registry.worker.engine import InferenceEngine
from models_registry.worker.liveness import LivenessThread
from models_registry.worker.pull_loop import PullLoop

logger = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 60.0
ALIVE_TTL_S = 3.0  # a SIGKILLed worker's messages are requeued this long after its death


def _switch_ready() -> list[str]:
    """Record as live each target version that every worker serving its model has warm (sync ORM)."""
    return version_changes.switch_ready(ready_everywhere(w.models_state for w in heartbeats.live_workers() if not w.draining))


class InferenceWorker(Worker):
    """Pulls inference messages while the engine batches, computes and reports."""

    # Long-running companions started with the pull loop, each given the worker's id (the runworker
    # command adds the batch-job driver: jobs sit above the worker, so the worker cannot name it).
    services: tuple[Callable[[str], Awaitable[None]], ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Refused here, before any model loads: a layer without leased pulls cannot feed the engine.
        self.layer: WorkLayer = require_work_layer(self.channel_layer)
        from models_registry.inference.adapter_cache import AdapterBudget
        from models_registry.inference.onnx_backend import OrtSettings  # torch loads here, not at import

        # The runner class is a setting: a team may wrap the pipeline runner (a tracing or a test one).
        runner_class = import_string(conf.MODEL_RUNNER)
        self.runner = runner_class(
            conf.DEVICE, conf.TORCH_THREADS, packing=conf.SEQUENCE_PACKING,
            torchscript=conf.TORCHSCRIPT,
            ort=OrtSettings(conf.ONNX_CACHE_DIR, conf.INT8_MIN_COSINE, arena=not conf.MEMORY_CAP),
            adapters=AdapterBudget(conf.MAX_LOADED_ADAPTERS, conf.ADAPTER_MEMORY_BYTES))
        self.engine: InferenceEngine | None = None

    async def handle(self) -> None:
        """Run until SIGTERM/SIGINT, then stop taking work, drain, give back leases and exit."""
        engine = InferenceEngine(self.layer, self.runner, conf.WORKER_MODELS, conf.BATCH_AGING_S,
                                 MemoryConfig(conf.WORKER_MEMORY_BYTES, conf.MEMORY_CAP,
                                              conf.MAX_LOADED_MODELS))
        self.engine = engine
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)

        await self._announce(engine)
        # Liveness and the heartbeat from a thread of their own: a busy worker is alive (worker.liveness).
        self.liveness = LivenessThread(self.layer, engine.worker_id, ALIVE_TTL_S, conf.HEARTBEAT_S,
                                       conf.WORKER_HUNG_S, self._write_beat)
        self._report(engine)
        self.liveness.start()
        await self._refresh_config(engine)  # load models at start, not on first use
        background = [
            asyncio.ensure_future(engine.run_batches()),
            asyncio.ensure_future(self._config_loop(engine)),
            asyncio.ensure_future(self._heartbeat_loop(engine)),
            asyncio.ensure_future(self._liveness_loop(engine)),
            asyncio.ensure_future(engine.placer.run()),
        ]
        listeners = [asyncio.ensure_future(PullLoop(self.layer, engine).run())]
        listeners.extend(asyncio.ensure_future(service(engine.worker_id)) for service in self.services)
        logger.info("worker %s listening on %s", engine.worker_id, ", ".join(self.channels))
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait([stopped, *listeners, *background], return_when=asyncio.FIRST_COMPLETED)
        for task in (*listeners, *background):
            if task.done() and not task.cancelled() and task.exception():
                logger.error("worker task failed", exc_info=task.exception())

        logger.info("worker %s draining", engine.worker_id)
        engine.draining = True
        for task in listeners:
            task.cancel()
        self._report(engine)
        try:
            await sync_to_async(self._write_beat)(self.liveness.snapshot)  # draining: seen at once
        except Exception:
            logger.exception("could not write the heartbeat")
        await engine.drain(DRAIN_TIMEOUT_S)
        for task in background:
            task.cancel()
        await sync_to_async(self.liveness.stop)()  # before the leases go back and the heartbeat is forgotten
        try:
            requeued = await self.layer.retire(engine.worker_id)
            if requeued:
                logger.warning("gave %d unanswered messages back to the channel", requeued)
        except Exception:
            logger.exception("could not give leases back; they are requeued when the liveness key expires")
        try:
            await engine.placer.retire()
        except Exception:
            logger.warning("could not withdraw this worker's model holdings; they expire in seconds")
        await sync_to_async(heartbeats.forget)(engine.worker_id)
        engine.shutdown()
        logger.info("worker %s stopped", engine.worker_id)

    async def _announce(self, engine: InferenceEngine) -> None:
        try:
            await self.layer.announce(engine.worker_id, ALIVE_TTL_S)
        except Exception as error:
            logger.warning("could not announce liveness: %s", error)

    async def _liveness_loop(self, engine: InferenceEngine) -> None:
        """Requeue the messages of dead workers (our own liveness key is kept by the liveness thread)."""
        while True:
            await asyncio.sleep(ALIVE_TTL_S / 3)
            try:
                moved = await self.layer.recover_dead_workers(engine.worker_id)
                if moved:
                    logger.warning("requeued %d messages of a dead worker", moved)
                # Every tick, not only after a recovery here: another worker may have quarantined them.
                await quarantine.answer_poison(self.layer, engine.replies)
            except Exception as error:
                logger.warning("dead-worker recovery failed: %s", error)

    async def _refresh_config(self, engine: InferenceEngine) -> None:
        try:
            specs = await sync_to_async(read_specs)()
        except Exception:
            logger.exception("could not read the model registry; keeping the current models")
            return
        await engine.reconcile(worker_specs(specs))
        if any(spec.rollout.target for spec in specs.values()):
            try:
                switched = await sync_to_async(_switch_ready)()
            except Exception:
                logger.exception("could not switch a warm version live")
                return
            if switched:
                logger.info("switched to the new live version of %s", ", ".join(switched))

    async def _config_loop(self, engine: InferenceEngine) -> None:
        while True:
            await asyncio.sleep(conf.CONFIG_REFRESH_S)
            await self._refresh_config(engine)

    def _report(self, engine: InferenceEngine) -> None:
        """Hand the liveness thread this worker's state (read here, on the loop that owns it)."""
        self.liveness.report((engine.worker_id, self.runner.default_device, engine.models_state(),
                              engine.queue_depths(), engine.stats.started_at, engine.draining, engine.busy.current(),
                              sorted(engine.models.serve_models)))  # from the first beat: what /ready waits for

    @staticmethod
    def _write_beat(snapshot: tuple[Any, ...]) -> None:
        heartbeats.beat(*snapshot)

    async def _heartbeat_loop(self, engine: InferenceEngine) -> None:
        while True:
            self._report(engine)
            await asyncio.sleep(conf.HEARTBEAT_S)
