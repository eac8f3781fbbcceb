"""The engine's counters and the per-model report its heartbeat carries."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from models_registry.core.model_state import ModelState
from models_registry.core.task_key import TaskKey
from models_registry.worker.model_slots import ModelSlots, memory_report

COST_SMOOTHING = 0.3  # weight of the newest batch in the cost estimate


@dataclass
class EngineStats:
    """Counters the heartbeat reports."""

    batches: int = 0
    items: int = 0
    expired: int = 0
    rejected: int = 0
    dropped: int = 0  # clients gone before compute
    started_at: float = field(default_factory=time.time)
    completed: dict[str, int] = field(default_factory=dict)  # items answered per "model/task"
    # "model/task" -> [seconds of compute per input token, tokens per item], smoothed over batches:
    # what a queue of N items will take to drain, known also while the queue is idle.
    costs: dict[str, list[float]] = field(default_factory=dict)
    busy_s: float = 0.0  # seconds spent computing batches, in all

    def record_batch(self, key: tuple[str, str], items: int, tokens: int = 0, compute_s: float = 0.0) -> None:
        """Count one computed batch of items (tokens input tokens, compute_s seconds) for key (model, task)."""
        self.batches += 1
        self.items += items
        self.busy_s += compute_s
        name = str(TaskKey(*key))
        self.completed[name] = self.completed.get(name, 0) + items
        if items and tokens and compute_s > 0:
            sample = [compute_s / tokens, tokens / items]
            old = self.costs.get(name)
            self.costs[name] = sample if old is None else [
                round(o + COST_SMOOTHING * (s - o), 9) for o, s in zip(old, sample)]


class BusyMeter:
    """The share of wall time spent computing since the previous reading (0 to 1): what an autoscaler reads."""

    def __init__(self, stats: EngineStats) -> None:
        self.stats = stats
        self._sample = (time.time(), stats.busy_s)
        self._fraction = 0.0

    def current(self) -> float:
        """Busy share since the last reading at least half a second ago."""
        now = time.time()
        then, busy = self._sample
        if now - then >= 0.5:
            self._fraction = max(0.0, min(1.0, (self.stats.busy_s - busy) / (now - then)))
            self._sample = (now, self.stats.busy_s)
        return round(self._fraction, 4)


class DrainRates:
    """Items answered per second per "model/task", over at least half a second."""

    def __init__(self, stats: EngineStats) -> None:
        self.stats = stats
        self._rates: dict[str, float] = {}
        self._sample: tuple[float, dict[str, int]] = (time.time(), {})

    def current(self) -> dict[str, float]:
        """The rates since the previous sample (re-sampled when half a second has passed)."""
        now = time.time()
        then, before = self._sample
        if now - then >= 0.5:
            self._rates = {k: (v - before.get(k, 0)) / (now - then) for k, v in self.stats.completed.items()}
            self._sample = (now, dict(self.stats.completed))
        return {k: round(v, 2) for k, v in self._rates.items()}


def models_report(slots: ModelSlots, stats: EngineStats, rates: dict[str, float]) -> dict[str, dict[str, Any]]:
    """{model: {state, error, device, tasks, drain_rates, served}} for the heartbeat."""
    return {
        name: {
            "state": slot.state.value,
            # Dropped by the registry and answering only what still reaches it: not ready for a switch (rollout)
            "retiring": slot.retired_at is not None,
            "error": slot.error,
            "device": getattr(slot.loaded, "device", ""),
            **(slot.loaded.backend if slot.loaded is not None else {}),
            "tasks": list(slot.spec.tasks),
            "drain_rates": {t: rates.get(str(TaskKey(name, t)), 0.0) for t in slot.spec.tasks},
            "served": {t: stats.completed.get(str(TaskKey(name, t)), 0) for t in slot.spec.tasks},
            "costs": {t: stats.costs[str(TaskKey(name, t))] for t in slot.spec.tasks
                      if str(TaskKey(name, t)) in stats.costs},
            **memory_report(slots, name),
        }
        for name, slot in slots.items()
    } | {name: {"state": ModelState.AVAILABLE.value, "error": "", "tasks": list(slots.specs[name].tasks),
                **memory_report(slots, name)} for name in slots.available()}
