"""The `runworker inference` process: channels' Worker plus the engine's background tasks."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

from asgiref.sync import sync_to_async
from channels.worker import Worker
from django.conf import settings

from models_registry import engine_registry, heartbeats
from models_registry.engine import InferenceEngine
from models_registry.specs import read_specs

logger = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 60.0


class InferenceWorker(Worker):
    """Listens on the inference channel while the engine batches, computes and reports."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from models_registry.runner import PipelineRunner  # torch loads here, not at import

        self.runner = PipelineRunner(settings.HOSTING_DEVICE, settings.HOSTING_TORCH_THREADS)
        self.engine: InferenceEngine | None = None

    async def handle(self) -> None:
        """Run the listeners and the engine until SIGTERM/SIGINT, then drain and exit."""
        engine = InferenceEngine(self.channel_layer, self.runner, settings.HOSTING_WORKER_MODELS)
        self.engine = engine
        engine_registry.install(engine)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)

        await self._refresh_config(engine)  # load models at start, not on first use
        background = [
            asyncio.ensure_future(engine.run_batches()),
            asyncio.ensure_future(self._config_loop(engine)),
            asyncio.ensure_future(self._heartbeat_loop(engine)),
        ]
        listening = asyncio.ensure_future(super().handle())
        logger.info("worker %s listening on %s", engine.worker_id, ", ".join(self.channels))
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait([listening, stopped, *background], return_when=asyncio.FIRST_COMPLETED)
        for task in (listening, *background):
            if task.done() and task.exception():
                logger.error("worker task failed", exc_info=task.exception())

        logger.info("worker %s draining", engine.worker_id)
        listening.cancel()  # a cancelled receive leaves its message in the layer's backup queue
        await self._beat(engine)
        await engine.drain(DRAIN_TIMEOUT_S)
        for task in background:
            task.cancel()
        await sync_to_async(heartbeats.forget)(engine.worker_id)
        engine.shutdown()
        logger.info("worker %s stopped", engine.worker_id)

    async def _refresh_config(self, engine: InferenceEngine) -> None:
        try:
            specs = await sync_to_async(read_specs)()
        except Exception:
            logger.exception("could not read the model registry; keeping the current models")
            return
        await engine.reconcile(specs)

    async def _config_loop(self, engine: InferenceEngine) -> None:
        while True:
            await asyncio.sleep(settings.HOSTING_CONFIG_REFRESH_S)
            await self._refresh_config(engine)

    async def _beat(self, engine: InferenceEngine) -> None:
        try:
            await sync_to_async(heartbeats.beat)(
                engine.worker_id, self.runner.default_device, engine.models_state(),
                engine.queue_depths(), engine.stats.started_at, engine.draining,
            )
        except Exception:
            logger.exception("could not write the heartbeat")

    async def _heartbeat_loop(self, engine: InferenceEngine) -> None:
        while True:
            await self._beat(engine)
            await asyncio.sleep(settings.HOSTING_HEARTBEAT_S)
