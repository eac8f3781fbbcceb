"""Loads, evictions and load seconds per model on one worker, in the shape /metrics exports (heartbeat)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

LOAD_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
RECENT = 50  # load durations kept per model for the admin and the tests


@dataclass
class ModelLoads:
    """One model's counters."""

    loads: int = 0
    evictions: int = 0
    seconds_sum: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * len(LOAD_BUCKETS))  # cumulative, as Prometheus'
    recent: list[float] = field(default_factory=list)

    def report(self) -> dict[str, Any]:
        """The counters as plain JSON."""
        return {"loads": self.loads, "evictions": self.evictions, "load_seconds_sum": round(self.seconds_sum, 4),
                "load_seconds_buckets": list(self.buckets), "recent_load_seconds": list(self.recent)}


class LoadStats:
    """Counters for every model this worker has loaded (kept after an unload)."""

    def __init__(self) -> None:
        self.models: dict[str, ModelLoads] = {}

    def loaded(self, name: str, seconds: float) -> None:
        """Count one load that took seconds (load, measurement and warm-up)."""
        entry = self.models.setdefault(name, ModelLoads())
        entry.loads += 1
        entry.seconds_sum += seconds
        for index, bound in enumerate(LOAD_BUCKETS):
            if seconds <= bound:
                entry.buckets[index] += 1
        entry.recent = (entry.recent + [round(seconds, 4)])[-RECENT:]

    def evicted(self, name: str) -> None:
        """Count one unload made to make room."""
        self.models.setdefault(name, ModelLoads()).evictions += 1

    def report(self, name: str) -> dict[str, Any]:
        """One model's counters (zeros if it never loaded here)."""
        return self.models.get(name, ModelLoads()).report()
