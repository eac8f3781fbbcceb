"""The models one worker holds: loading them in a thread of their own, measuring, evicting, task policies.

Which model to load next is decided by capacity.placement_plan (pure); worker.placer feeds it
what the fleet looks like (backlogs, other holders). Here: the slots themselves, a load
with its memory measured and its batch shapes warmed up, and an unload.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from models_registry.capacity import memory_warmup
from models_registry.capacity.batch_memory import BatchMemory
from models_registry.capacity.placement_plan import Held, Limits, Wanted, load_choices, over_budget
from models_registry.core.conf import conf
from models_registry.core.model_state import ModelState
from models_registry.core.task_key import TaskKey
from models_registry.inference.backend import ModelRunner
from models_registry.observe.load_stats import LoadStats
from models_registry.catalog import output_shape
from models_registry.catalog.rollout import split_wire
from models_registry.catalog.specs import ModelSpec
from models_registry.worker import heap_freeze
from models_registry.worker.batcher import Batcher
from models_registry.worker.delivery import Delivery
from models_registry.worker.replies import Replies
from models_registry.worker.slot_change import SlotChange, slot_change

if TYPE_CHECKING:
    from models_registry.inference.loading import LoadedModel  # torch: not imported at run time

logger = logging.getLogger(__name__)

# Config refreshes a version no longer listed stays loaded: web processes route by a view up to one
# refresh old, and this worker learns of the change up to one refresh late.
RETIRE_GRACE_REFRESHES = 3


@dataclass
class ModelSlot:
    """What this worker holds for one model."""

    spec: ModelSpec
    state: ModelState = ModelState.LOADING  # then READY or ERROR
    error: str = ""
    loaded: LoadedModel | None = None  # once ready
    why: str = "start"  # what made this worker load it: start, keep_loaded, demand, hot, preload
    memory_bytes: int = 0  # resident bytes the load added (0 while loading)
    last_used: float = field(default_factory=time.time)
    in_use: int = 0  # batches computing on it right now
    retired_at: float | None = None  # when the registry stopped listing this version (it answers what reaches it)


class ModelSlots:
    """Keeps the loaded models in line with the registry and the limits; a model loads while the others serve."""

    def __init__(self, runner: ModelRunner, batcher: Batcher[Delivery], replies: Replies, on_change: Callable[[], None],
                 serve_models: list[str] | None = None, memory: BatchMemory | None = None,
                 limits: Limits | None = None) -> None:
        self.runner = runner
        self.batcher = batcher
        self.replies = replies
        self.on_change = on_change  # wakes the batch loop: policies or queues changed
        self.serve_models = set(serve_models or [])
        self.memory = memory or BatchMemory(0, enabled=False)
        self.limits = limits or Limits(max_loaded=0, model_bytes=0)
        self.slots: dict[str, ModelSlot] = {}
        self.specs: dict[str, ModelSpec] = {}  # every model this worker may serve (held or not)
        self.sizes: dict[str, int] = {}  # measured bytes per model, kept after an unload
        self.backlog: dict[str, int] = {}  # requests waiting in each held model's channel (the placer's last survey)
        self.stats = LoadStats()
        self.refreshes = 0  # registry views reconciled so far
        self.in_compute: Callable[[Callable[[], Any]], Awaitable[Any]] = self._in_loader  # the engine's compute thread
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
        """Whether this worker may hold the model."""
        if not spec.enabled or not spec.tasks:
            return False
        return not self.serve_models or split_wire(spec.name)[0] in self.serve_models  # any version of a listed model

    def available(self) -> list[str]:
        """Models this worker does not hold but would load on demand (they fit its limits)."""
        return [name for name in self.specs if name not in self.slots and self.fits(name)]

    def on_demand(self, name: str) -> bool:
        """Whether the model is one this worker may serve but cannot compute now (not held, or loading)."""
        slot = self.slots.get(name)
        return name in self.specs and (slot is None or slot.state == ModelState.LOADING)

    def fits(self, name: str) -> bool:
        """Whether the model's measured size (unknown: yes) fits what this worker may hold."""
        return not self.limits.model_bytes or self.sizes.get(name, 0) <= self.limits.model_bytes

    def touch(self, name: str) -> ModelSlot | None:
        """Mark a model just used (a batch of it was formed): its slot, which the batch computes on."""
        slot = self.slots.get(name)
        if slot is not None:
            slot.last_used = time.time()
        return slot

    @contextmanager
    def using(self, slot: ModelSlot) -> Iterator[None]:
        """Mark slot busy while a batch computes on it (an unload waits for idle models only)."""
        slot.in_use += 1
        try:
            yield
        finally:
            slot.in_use -= 1
            slot.last_used = time.time()

    async def reconcile(self, specs: dict[str, ModelSpec]) -> None:
        """Bring held models and queue settings in line with the registry; load what must and may load now."""
        self.specs = {name: spec for name, spec in specs.items() if self.wanted(spec)}
        self.refreshes += 1  # requests waiting for an adapter this view did not list look again (worker.adapter_waits)
        for name in list(self.slots):
            spec = self.specs.get(name)
            slot = self.slots[name]
            if spec is None and self._retiring(name, slot):
                continue
            slot.retired_at = None  # listed again (a rollback to it): served as any other
            change = slot_change(slot.spec, spec)
            if change == SlotChange.RELOAD:
                self._unload(name, "was disabled or changed")
                self.sizes.pop(name, None)
                for task_name in slot.spec.tasks:
                    self.memory.forget(TaskKey(name, task_name))
            elif change == SlotChange.APPLY and spec is not None:
                self._apply_tasks(slot, spec)
        # Without a count limit every model that fits loads at start, as it always has; with
        # one, the placer spreads models over the workers (it knows who holds what).
        await self.place({}, {}, preload=not self.limits.max_loaded, one_at_a_time=False, preload_why="start")

    def _retiring(self, name: str, slot: ModelSlot) -> bool:
        """Whether a version the registry dropped (its model still served) stays, to answer what still reaches it."""
        model, version = split_wire(name)
        if not version or slot.state != ModelState.READY or not any(split_wire(n)[0] == model for n in self.specs):
            return False
        now = time.time()
        if slot.retired_at is None:
            slot.retired_at = now
            logger.info("version %s retiring: unloaded once its requests are answered", name)
        depths = self.batcher.depths()
        busy = slot.in_use or self.backlog.get(name) or any(depths.get(TaskKey(name, t)) for t in slot.spec.tasks)
        return bool(busy) or now - slot.retired_at < RETIRE_GRACE_REFRESHES * conf.CONFIG_REFRESH_S

    async def place(self, backlog: dict[str, int], holders: dict[str, int], preload: bool = True,
                    hot: set[str] | None = None, claim: Callable[[str, str], Awaitable[bool]] | None = None,
                    one_at_a_time: bool = True, preload_why: str = "preload") -> list[str]:
        """Unload what the limits no longer allow, then start the loads placement chooses; the models started.

        claim(model, why): whether this worker may load it (another may be loading it already).
        one_at_a_time: start nothing while a load runs (evict only for the load that starts next).
        preload_why: what a preload is called ("start": requests are refused until it is ready, as at start-up).
        """
        now = time.time()
        held = self._held(backlog, now)
        for name in over_budget(held, self.limits, now):
            self._unload(name, "made room (over the memory budget)", evicted=True)
        started: list[str] = []
        while not (one_at_a_time and any(s.state == ModelState.LOADING for s in self.slots.values())):
            held = self._held(backlog, now)
            wanted = [
                Wanted(name, self.sizes.get(name, 0), spec.keep_loaded, backlog.get(name, 0), holders.get(name, 0),
                       hot=name in (hot or set()))
                for name, spec in self.specs.items() if name not in self.slots
            ]
            for name, why, evict in load_choices(held, wanted, self.limits, now):
                if why == "preload" and not preload:
                    continue
                if claim is not None and not await claim(name, why):
                    continue
                if evict and self._became_busy(evict, backlog):
                    # A request reached a model chosen to make room while the claim was asked: keep
                    # it and choose again next tick (the placer drops the claim of a load not started).
                    return started
                self._start_load(name, preload_why if why == "preload" else why, evict)
                started.append(name)
                break
            else:
                return started
        return started

    def _held(self, backlog: dict[str, int], now: float) -> list[Held]:
        depths = self.batcher.depths()
        return [Held(name, slot.memory_bytes or self.sizes.get(name, 0), slot.last_used,
                     busy=bool(slot.in_use or backlog.get(name)
                               or any(depths.get(TaskKey(name, t)) for t in slot.spec.tasks)),
                     pinned=slot.spec.keep_loaded, loading=slot.state == ModelState.LOADING)
                for name, slot in self.slots.items() if slot.state != ModelState.ERROR]

    def _became_busy(self, names: list[str], backlog: dict[str, int]) -> bool:
        """Whether any of these held models has a request queued or a batch computing now."""
        return any(held.busy for held in self._held(backlog, time.time()) if held.name in names)

    def _start_load(self, name: str, why: str, evict: list[str]) -> None:
        for other in evict:
            self._unload(other, f"made room for {name}", evicted=True)
        spec = self.specs[name]
        self.slots[name] = ModelSlot(spec=spec, why=why)
        logger.info("loading model %s (%s)%s", name, why, f", unloaded {', '.join(evict)}" if evict else "")
        asyncio.ensure_future(self._load(name, spec))

    async def _in_loader(self, work: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._loader, work)

    def shutdown(self) -> None:
        """Stop a load in progress (models die with the process)."""
        self._loader.shutdown(wait=False, cancel_futures=True)

    def _load_measured(self, spec: ModelSpec) -> tuple[LoadedModel, int]:
        """Load (in the loader thread) and measure the resident bytes the model added, then warm up its batches."""
        with self.memory.lock:  # between batches: a batch's transient memory is not the model's
            before = self.memory.probe.resting()
        output_shape.check(spec)  # a version whose answers look unlike live's is refused (before its weights load)
        loaded = self.runner.load(spec)
        output_shape.check(spec)  # a hub model's config is at hand now
        with self.memory.lock:
            added = max(0, self.memory.probe.resting() - before)
        return loaded, added

    async def _load(self, name: str, spec: ModelSpec) -> None:
        loop = asyncio.get_running_loop()
        started = time.time()
        try:
            loaded, added = await loop.run_in_executor(self._loader, self._load_measured, spec)
            # In the compute thread, where its batches will run (the measured ones in the probe's thread, as theirs),
            # one shape at a time: the live models' batches run between them. A fresh copy of a model held
            # already (Load now) starts from that one's fits instead.
            memory_warmup.inherit_fits(self.memory, spec, [slot.spec for slot in self.ready()])
            for step in memory_warmup.steps(self.memory, self.runner, spec, loaded):
                if not await self.in_compute(step):
                    break
        except Exception as error:
            logger.exception("loading model %s from %s failed", name, spec.source)
            slot = self.slots.get(name)
            if slot is not None and slot.spec is spec:
                slot.state = ModelState.ERROR
                slot.error = (str(error) if isinstance(error, output_shape.ShapeRefused)
                              else f"loading {spec.source!r} failed: {type(error).__name__}: {error}")[:2000]
            self.on_change()
            return
        slot = self.slots.get(name)
        if slot is None or slot.spec.load_key() != spec.load_key():
            return  # unloaded or changed while loading; the next reconcile loads anew
        seconds = time.time() - started
        slot.loaded, slot.state, slot.error, slot.memory_bytes = loaded, ModelState.READY, "", added
        slot.last_used = time.time()
        self.sizes[name] = added
        self.stats.loaded(name, seconds)
        self._apply_tasks(slot, slot.spec)
        heap_freeze.settle_after_load()  # the model lives as long as it is held: out of every full collection
        logger.info("model %s ready on %s in %.2fs (%s, %.0f MiB)", name, loaded.device, seconds, slot.why,
                    added / 2**20)

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

    def _unload(self, name: str, why: str, evicted: bool = False) -> None:
        slot = self.slots.pop(name)
        for task_name in slot.spec.tasks:
            self.replies.fail(self.batcher.remove(TaskKey(name, task_name)), f"model {name} {why}")
        slot.loaded = None
        if evicted:
            self.stats.evicted(name)
        heap_freeze.release_after_unload(len(self.slots))
        self.memory.probe.release_cache()
        logger.info("model %s unloaded: %s", name, why)


def memory_report(slots: ModelSlots, name: str) -> dict[str, Any]:
    """What the heartbeat says of one model's memory: measured size, batch fits per task, loads and evictions."""
    slot = slots.get(name)
    spec = slot.spec if slot is not None else slots.specs.get(name)
    tasks = spec.tasks if spec is not None else {}
    fits = {t: slots.memory.report(TaskKey(name, t)) for t in tasks}
    return {
        "memory_bytes": (slot.memory_bytes if slot is not None else 0) or slots.sizes.get(name, 0),
        "memory": {t: fit for t, fit in fits.items() if fit},
        "loaded_why": slot.why if slot is not None else "",
        "on_demand": slot is not None and slot.why != "start",  # requests wait for it rather than get a 503
        "last_used": round(slot.last_used, 3) if slot is not None else None,
        "keep_loaded": bool(spec and spec.keep_loaded),
        **slots.stats.report(name),
    }
