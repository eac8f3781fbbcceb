"""The models one worker holds: loading them in a thread of their own, unloading, task policies."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from models_registry.registry.model_state import ModelState
from models_registry.registry.specs import ModelSpec
from models_registry.registry.task_key import TaskKey
from models_registry.worker.batcher import Batcher
from models_registry.worker.replies import Replies

logger = logging.getLogger(__name__)


@dataclass
class ModelSlot:
    """What this worker holds for one model."""

    spec: ModelSpec
    state: ModelState = ModelState.LOADING  # then READY or ERROR
    error: str = ""
    loaded: Any = None  # inference.loading.LoadedModel once ready


class ModelSlots:
    """Keeps the loaded models in line with the registry; a model loads while the others serve."""

    def __init__(self, runner: Any, batcher: Batcher, replies: Replies, on_change: Callable[[], None],
                 serve_models: list[str] | None = None) -> None:
        self.runner = runner
        self.batcher = batcher
        self.replies = replies
        self.on_change = on_change  # wakes the batch loop: policies or queues changed
        self.serve_models = set(serve_models or [])
        self.slots: dict[str, ModelSlot] = {}
        self._loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="loader")

    def get(self, name: str) -> ModelSlot | None:
        """The slot of one model, if this worker holds it."""
        return self.slots.get(name)

    def items(self) -> Iterator[tuple[str, ModelSlot]]:
        """(model, slot) for every model held."""
        return iter(list(self.slots.items()))

    def ready(self) -> list[ModelSlot]:
        """The slots whose model can compute now."""
        return [slot for slot in self.slots.values() if slot.state == ModelState.READY]

    def wanted(self, spec: ModelSpec) -> bool:
        """Whether this worker should hold the model."""
        if not spec.enabled or not spec.tasks:
            return False
        return not self.serve_models or spec.name in self.serve_models

    async def reconcile(self, specs: dict[str, ModelSpec]) -> None:
        """Bring loaded models and queue settings in line with the registry."""
        for name in list(self.slots):
            spec = specs.get(name)
            slot = self.slots[name]
            if spec is None or not self.wanted(spec) or spec.load_key() != slot.spec.load_key():
                self._unload(name)
            elif spec != slot.spec:
                self._apply_tasks(slot, spec)
        for name, spec in specs.items():
            if self.wanted(spec) and name not in self.slots:
                self.slots[name] = ModelSlot(spec=spec)
                asyncio.ensure_future(self._load(name, spec))

    def shutdown(self) -> None:
        """Stop a load in progress (models die with the process)."""
        self._loader.shutdown(wait=False, cancel_futures=True)

    async def _load(self, name: str, spec: ModelSpec) -> None:
        loop = asyncio.get_running_loop()
        started = time.time()
        try:
            loaded = await loop.run_in_executor(self._loader, self.runner.load, spec)
        except Exception as error:
            logger.exception("loading model %s from %s failed", name, spec.source)
            slot = self.slots.get(name)
            if slot is not None and slot.spec is spec:
                slot.state = ModelState.ERROR
                slot.error = f"loading {spec.source!r} failed: {type(error).__name__}: {error}"[:2000]
            return
        slot = self.slots.get(name)
        if slot is None or slot.spec.load_key() != spec.load_key():
            return  # unloaded or changed while loading; the next reconcile loads anew
        slot.loaded, slot.state, slot.error = loaded, ModelState.READY, ""
        self._apply_tasks(slot, slot.spec)
        logger.info("model %s ready on %s in %.1fs", name, loaded.device, time.time() - started)

    def _apply_tasks(self, slot: ModelSlot, spec: ModelSpec) -> None:
        old_tasks = set(slot.spec.tasks)
        slot.spec = spec
        if slot.state != ModelState.READY:
            return
        for task_name in old_tasks - set(spec.tasks):
            self.replies.fail(self.batcher.remove(TaskKey(spec.name, task_name)), f"task {task_name} was removed")
        for task_name, task in spec.tasks.items():
            self.batcher.set_policy(TaskKey(spec.name, task_name), task.policy)
        self.on_change()

    def _unload(self, name: str) -> None:
        slot = self.slots.pop(name)
        for task_name in slot.spec.tasks:
            self.replies.fail(self.batcher.remove(TaskKey(name, task_name)), f"model {name} was disabled or changed")
        logger.info("model %s unloaded", name)
