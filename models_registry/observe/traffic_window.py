"""A rolling window of this web process' recent inference traffic, per model and task.

Prometheus histograms are cumulative since start; the dashboard and the admin want "what
happens right now": requests per second, latency percentiles per second, the batch sizes
of the last minutes. One-second buckets, kept for WINDOW_S, fed by the metrics hooks on
the request path (a lock and a few appends per request), read by the dashboard.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

WINDOW_S = 300
SAMPLES_PER_SECOND = 500  # latency samples kept per bucket (a random subset beyond this)
REJECTIONS = ("overloaded", "unavailable", "timeout")
LATENCY_KINDS = ("total", "queue", "compute")
PERCENTILES = (50, 95, 99)
BATCH_BOUNDS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def percentile(values: list[float], pct: float) -> float | None:
    """Nearest-rank percentile of values, rounded to microseconds of ms (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return round(ordered[rank - 1], 3)


def batch_bucket(size: int) -> int:
    """Index of the first BATCH_BOUNDS bound that size fits under (the last catches the rest)."""
    for index, bound in enumerate(BATCH_BOUNDS):
        if size <= bound:
            return index
    return len(BATCH_BOUNDS)


def batch_labels() -> list[str]:
    """Human labels of the batch-size buckets: 1, 2, 3-4, 5-8, ... >512."""
    labels, low = [], 1
    for bound in BATCH_BOUNDS:
        labels.append(str(bound) if low == bound else f"{low}-{bound}")
        low = bound + 1
    return labels + [f">{BATCH_BOUNDS[-1]}"]


@dataclass
class _Second:
    """What happened to one model/task during one wall-clock second."""

    at: int
    requests: int = 0
    errors: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    seen: int = 0  # successes offered to the latency reservoir
    latency: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in LATENCY_KINDS})
    batches: list[int] = field(default_factory=lambda: [0] * (len(BATCH_BOUNDS) + 1))
    depth: int | None = None
    cache_hits: int = 0

    def add_latency(self, samples: tuple[float, float, float]) -> None:
        """Keep a uniform random subset of at most SAMPLES_PER_SECOND samples (reservoir)."""
        self.seen += 1
        slot = len(self.latency["total"]) if self.seen <= SAMPLES_PER_SECOND else random.randrange(self.seen)
        if slot >= SAMPLES_PER_SECOND:
            return
        for kind, value in zip(LATENCY_KINDS, samples, strict=True):
            if slot == len(self.latency[kind]):
                self.latency[kind].append(value)
            else:
                self.latency[kind][slot] = value


class RollingWindow:
    """Per-second buckets of requests, errors, rejections, latencies and batch sizes."""

    def __init__(self, window_s: int = WINDOW_S, clock: Callable[[], float] = time.time) -> None:
        self.window_s = window_s
        self.clock = clock
        self._lock = threading.Lock()
        self._keys: dict[tuple[str, str], deque[_Second]] = {}

    def _bucket(self, model: str, task: str) -> _Second:
        """The current second's bucket of model/task, dropping expired ones (lock held)."""
        now = int(self.clock())
        buckets = self._keys.setdefault((model, task), deque())
        if not buckets or buckets[-1].at < now:
            buckets.append(_Second(at=now))
        while buckets[0].at <= now - self.window_s:
            buckets.popleft()
        return buckets[-1]  # a clock that went back still lands in the newest bucket

    def record_success(self, model: str, task: str, duration_s: float, queue_s: float, compute_s: float,
                       batch_size: int) -> None:
        """An answered request with the worker's timings."""
        with self._lock:
            bucket = self._bucket(model, task)
            bucket.requests += 1
            bucket.add_latency((duration_s * 1000, queue_s * 1000, compute_s * 1000))
            if batch_size:
                bucket.batches[batch_bucket(batch_size)] += 1
            else:  # no batch: answered from the response cache
                bucket.cache_hits += 1

    def record_failure(self, model: str, task: str, error_type: str) -> None:
        """A request answered with an error; refusals and timeouts by kind."""
        with self._lock:
            bucket = self._bucket(model, task)
            bucket.requests += 1
            bucket.errors += 1
            if error_type in REJECTIONS:
                bucket.rejected[error_type] = bucket.rejected.get(error_type, 0) + 1

    def record_depth(self, model: str, task: str, depth: int) -> None:
        """The queue depth the workers reported, sampled now."""
        with self._lock:
            self._bucket(model, task).depth = depth

    def _snapshot(self, model: str, task: str, seconds: int) -> tuple[int, dict[int, _Second]]:
        """The last complete second and the buckets of the seconds before it."""
        end = int(self.clock()) - 1  # the current second is still filling
        with self._lock:
            buckets = self._keys.get((model, task), ())
            return end, {b.at: b for b in buckets if end - seconds < b.at <= end}

    def series(self, model: str, task: str, seconds: int = 120) -> dict[str, list[Any]]:
        """One value per second for the charts: rates, percentiles (ms), rejections, depth."""
        end, by_second = self._snapshot(model, task, seconds)
        out: dict[str, list[Any]] = {"t": list(range(end - seconds + 1, end + 1))}
        names = ["rps", "errors", "depth", *REJECTIONS] + [f"{k}_p{p}" for k in LATENCY_KINDS for p in PERCENTILES]
        for name in names:
            out[name] = []
        for at in out["t"]:
            bucket = by_second.get(at)
            out["rps"].append(bucket.requests if bucket else 0)
            out["errors"].append(bucket.errors if bucket else 0)
            out["depth"].append(bucket.depth if bucket else None)
            for reason in REJECTIONS:
                out[reason].append(bucket.rejected.get(reason, 0) if bucket else 0)
            for kind in LATENCY_KINDS:
                values = bucket.latency[kind] if bucket else []
                for pct in PERCENTILES:
                    out[f"{kind}_p{pct}"].append(percentile(values, pct))
        return out

    def summary(self, model: str, task: str, seconds: int = 60) -> dict[str, Any]:
        """Totals over the last seconds: rate, errors, rejections and latency percentiles (ms)."""
        _, by_second = self._snapshot(model, task, seconds)
        buckets = list(by_second.values())
        requests = sum(b.requests for b in buckets)
        latency = {
            kind: {f"p{p}": percentile([v for b in buckets for v in b.latency[kind]], p) for p in PERCENTILES}
            for kind in LATENCY_KINDS
        }
        return {
            "seconds": seconds,
            "requests": requests,
            "rps": round(requests / seconds, 3),
            "errors": sum(b.errors for b in buckets),
            "cache_hits": sum(b.cache_hits for b in buckets),
            "rejected": {r: sum(b.rejected.get(r, 0) for b in buckets) for r in REJECTIONS},
            "latency_ms": latency,
        }

    def batch_sizes(self, model: str, task: str, seconds: int = WINDOW_S) -> dict[str, list[Any]]:
        """How many answered requests rode in batches of each size bucket, over the last seconds."""
        _, by_second = self._snapshot(model, task, seconds)
        counts = [sum(b.batches[i] for b in by_second.values()) for i in range(len(BATCH_BOUNDS) + 1)]
        return {"labels": batch_labels(), "counts": counts}

    def rate(self, model: str, seconds: int = 60) -> float:
        """Requests per second to model (all tasks) over the last seconds, this one included."""
        end = int(self.clock())
        with self._lock:
            total = sum(
                b.requests for (name, _), buckets in self._keys.items() if name == model
                for b in buckets if end - seconds < b.at <= end
            )
        return total / seconds

    def clear(self) -> None:
        """Forget everything (tests)."""
        with self._lock:
            self._keys.clear()


WINDOW = RollingWindow()
