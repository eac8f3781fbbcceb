"""What an autoscaler reads from /metrics: pending items and the oldest one's wait per model/task, workers' busy share.

Pending items are the admission sets (admitted, not yet answered: in Redis, on a worker, or
computing), summed over a model's versions; the heartbeat's hosting_inference_queue_depth
only counts what workers already pulled. Read at scrape time, from Redis and the heartbeats.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from channels.layers import get_channel_layer
from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from models_registry.broker.admission import pending_key
from models_registry.catalog.rollout import wire_name
from models_registry.core.conf import conf

logger = logging.getLogger(__name__)

_clients: dict[str, Any] = {}


def _families() -> dict[str, GaugeMetricFamily]:
    return {
        "pending": GaugeMetricFamily("hosting_queue_pending_items",
                                     "Items admitted and not yet answered (waiting or computing), all versions.",
                                     labels=["model", "task"]),
        "wait": GaugeMetricFamily("hosting_queue_oldest_wait_seconds",
                                  "How long the oldest pending item has waited.", labels=["model", "task"]),
        "busy": GaugeMetricFamily("hosting_worker_busy_ratio", "Share of the last second a worker spent computing.",
                                  labels=["worker"]),
        "fleet": GaugeMetricFamily("hosting_workers_busy_ratio", "Mean busy share of the live, non-draining workers."),
    }


def _client() -> Any:
    import redis

    url = conf.REDIS_URL
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)
    return _clients[url]


def pending(specs: dict[str, Any], client: Any, layer: Any, now: float) -> dict[tuple[str, str], tuple[int, float]]:
    """{(model, task): (pending items, oldest wait in s)} over every version workers hold."""
    keys: list[tuple[str, str, float, str]] = []
    for name, spec in specs.items():
        wires = [wire_name(name, v) for v in spec.rollout.held()] if spec.version else [name]
        for task in spec.tasks.values():
            keys.extend((name, task.name, task.timeout_s, pending_key(layer, wire, task.name)) for wire in wires)
    pipe = client.pipeline(transaction=False)
    for *_, key in keys:
        pipe.zcount(key, now, "+inf")  # scores are deadlines: the expired are gone
        pipe.zrangebyscore(key, now, "+inf", start=0, num=1, withscores=True)
    replies = pipe.execute() if keys else []
    found: dict[tuple[str, str], tuple[int, float]] = {}
    for index, (name, task, timeout_s, _) in enumerate(keys):
        count, first = int(replies[2 * index]), replies[2 * index + 1]
        wait = max(0.0, now - (float(first[0][1]) - timeout_s)) if first else 0.0  # admitted at deadline - timeout
        items, oldest = found.get((name, task), (0, 0.0))
        found[(name, task)] = (items + count, max(oldest, wait))
    return found


class ScalingCollector(Collector):
    """Pending items, their oldest wait and the workers' busy share, at scrape time."""

    def describe(self) -> list[Metric]:
        """The names, without samples: registering must not query anything."""
        return list(_families().values())

    def collect(self) -> Iterator[Metric]:
        """Read the registry, Redis and the heartbeats; what cannot be read is left out, never an error."""
        from models_registry.catalog.heartbeats import live_workers
        from models_registry.catalog.specs import read_specs

        families = _families()
        try:
            found = pending(read_specs(), _client(), get_channel_layer(), time.time())
        except Exception as error:  # Redis or the database away: the scrape still answers
            logger.warning("pending items unavailable: %s", error)
            found = {}
        for (model, task), (items, wait) in sorted(found.items()):
            families["pending"].add_metric([model, task], items)
            families["wait"].add_metric([model, task], round(wait, 3))
        try:
            workers = [w for w in live_workers() if not w.draining]
        except Exception:
            workers = []
        for worker in workers:
            families["busy"].add_metric([f"{worker.host}:{worker.pid}"], worker.busy_fraction)
        families["fleet"].add_metric([], sum(w.busy_fraction for w in workers) / len(workers) if workers else 0.0)
        yield from families.values()


_registered = False


def register() -> None:
    """Add the collector to the default registry once per process."""
    global _registered
    if not _registered:
        REGISTRY.register(ScalingCollector())
        _registered = True
