"""Every inference metric, registered in one place.

The worker's facts (queue time, compute time, batch size) travel back in each reply
message and are observed here, in the web process that answered the request: no
exporter port per worker. Several web processes on one port (`make run` starts one per
core) write their counters and histograms to prometheus_client's multiprocess directory
(PROMETHEUS_MULTIPROC_DIR, which `manage.py serve` sets up under var/ and clears before
they start), and a scrape of any of them reads every process' values: whole for the port,
and never going backwards (a restarted process' files stay). Gauges that describe the
fleet (queue depth, live workers) are read from the workers' heartbeats at scrape time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from models_registry.core.conf import conf
from models_registry.core.task_key import TaskKey
from models_registry.observe import traffic_window
from models_registry.catalog.rollout import split_wire

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)

REQUESTS = Counter(
    "hosting_inference_requests", "Inference requests answered, by status code.", ["model", "task", "status"]
)
REQUEST_DURATION = Histogram(
    "hosting_inference_request_duration_seconds", "End-to-end latency of inference requests.",
    ["model", "task"], buckets=LATENCY_BUCKETS,
)
QUEUE_DURATION = Histogram(
    "hosting_inference_queue_duration_seconds", "Time from arrival at the worker to the start of compute.",
    ["model", "task"], buckets=LATENCY_BUCKETS,
)
COMPUTE_DURATION = Histogram(
    "hosting_inference_compute_duration_seconds", "Time the batch that held the request spent computing.",
    ["model", "task"], buckets=LATENCY_BUCKETS,
)
BATCH_SIZE = Histogram(
    "hosting_inference_batch_size", "Items in the batch that held the request.", ["model", "task"],
    buckets=BATCH_BUCKETS,
)
REJECTED = Counter(
    "hosting_inference_rejected", "Requests refused before compute, by reason.", ["model", "task", "reason"]
)
TOKEN_REQUESTS = Counter(
    "hosting_token_requests", "Inference requests admitted per API token (id, or name: token_label).", ["token"]
)
TOKEN_INPUT_TOKENS = Counter(
    "hosting_token_input_tokens", "Tokens charged per API token (id or name; worker-counted).", ["token"]
)
RATE_LIMITED = Counter(
    "hosting_rate_limited", "Requests refused by a token's rate limit or quota.", ["token", "limit"]
)
CACHE_LOOKUPS = Counter(
    "hosting_cache_lookups", "Response cache lookups by result (hit, miss).", ["model", "task", "result"]
)
MEDIA_ITEMS = Counter(
    "hosting_media_items", "Image and audio inputs accepted, by kind (image, audio).", ["model", "task", "kind"]
)
MEDIA_BYTES = Counter(
    "hosting_media_bytes", "Bytes of the image and audio files accepted (as sent, before decoding).",
    ["model", "task", "kind"]
)
_token_labels: set[str] = set()
# Per token label, its two counters: labels() takes a lock and builds a key on every call, twice per request,
# while the labels are bounded (HOSTING_METRICS_MAX_TOKENS and "other").
_token_counters: dict[str, tuple[Any, Any]] = {}


def observe_token(name: str, token_id: int, tokens: int) -> None:
    """One request an API token was charged for, and the input tokens it used (0: refunded)."""
    label = token_label(name, token_id)
    counters = _token_counters.get(label)
    if counters is None:
        counters = _token_counters[label] = (TOKEN_REQUESTS.labels(label), TOKEN_INPUT_TOKENS.labels(label))
    counters[0].inc()
    if tokens:
        counters[1].inc(tokens)


def token_label(name: str, token_id: int) -> str:
    """The token's label: "id:<id>", or its name where /metrics is protected or names are asked for.

    /metrics is open by default (no HOSTING_METRICS_TOKEN): token names there would tell
    anyone who the customers are. Past HOSTING_METRICS_MAX_TOKENS labels: "other" (bounded series).
    """
    names = conf.METRICS_TOKEN_NAMES or bool(conf.METRICS_TOKEN)
    name = name if names else f"id:{token_id}"
    if name in _token_labels:
        return name
    if len(_token_labels) >= conf.METRICS_MAX_TOKENS:
        return "other"
    _token_labels.add(name)
    return name


# The metrics of a served request, per (model, task): labels() takes a lock and builds a key
# on every call, five times per request, while the (model, task) pairs are the registered few.
_served: dict[tuple[str, str], tuple[Any, Any, Any, Any, Any]] = {}


def _served_metrics(model: str, task: str) -> tuple[Any, Any, Any, Any, Any]:
    found = _served.get((model, task))
    if found is None:
        found = _served[(model, task)] = (
            REQUESTS.labels(model, task, "200"), REQUEST_DURATION.labels(model, task),
            QUEUE_DURATION.labels(model, task), COMPUTE_DURATION.labels(model, task), BATCH_SIZE.labels(model, task),
        )
    return found


def observe_success(model: str, task: str, duration_s: float, queue_s: float, compute_s: float,
                    batch_size: int) -> None:
    """Record an answered request and what the worker reported about it."""
    requests, duration, queue, compute, batch = _served_metrics(model, task)
    requests.inc()
    duration.observe(duration_s)
    if batch_size:  # 0: answered from the response cache, no worker involved
        queue.observe(queue_s)
        compute.observe(compute_s)
        batch.observe(batch_size)
    traffic_window.WINDOW.record_success(model, task, duration_s, queue_s, compute_s, batch_size)


def observe_failure(model: str, task: str, status: int, error_type: str, duration_s: float) -> None:
    """Record a request answered with an error; refusals also count as rejections."""
    REQUESTS.labels(model, task, str(status)).inc()
    REQUEST_DURATION.labels(model, task).observe(duration_s)
    if error_type in ("overloaded", "unavailable", "timeout"):
        REJECTED.labels(model, task, error_type).inc()
    traffic_window.WINDOW.record_failure(model, task, error_type)


class FleetCollector(Collector):
    """Queue depth per model/task and live workers, from heartbeats at scrape time."""

    def describe(self) -> list[GaugeMetricFamily]:
        """The names, without samples: registering must not query the database."""
        return [
            GaugeMetricFamily("hosting_inference_queue_depth", "Items waiting on live workers.", labels=["model", "task"]),
            GaugeMetricFamily("hosting_workers_alive", "Workers with a heartbeat younger than 10 s."),
        ]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from models_registry.catalog.heartbeats import live_workers

        depth = GaugeMetricFamily(
            "hosting_inference_queue_depth", "Items waiting on live workers.", labels=["model", "task"]
        )
        alive = GaugeMetricFamily("hosting_workers_alive", "Workers with a heartbeat younger than 10 s.")
        try:
            workers = live_workers()
        except Exception:  # the database is down: report what we can, never fail the scrape
            workers = []
        totals: dict[tuple[str, str], int] = {}
        for worker in workers:
            for key, value in (worker.queue_depths or {}).items():
                wire, task = TaskKey.parse(key)
                model = split_wire(wire)[0]  # every version's queue counts as its model's
                totals[(model, task)] = totals.get((model, task), 0) + int(value)
            for wire, state in (worker.models_state or {}).items():
                for task in state.get("tasks", []):
                    totals.setdefault((split_wire(wire)[0], task), 0)
        for (model, task), value in sorted(totals.items()):
            depth.add_metric([model, task], value)
        alive.add_metric([], len(workers))
        yield depth
        yield alive


_registered = False
_scraped: CollectorRegistry | None = None


def _fleet_collectors() -> list[Collector]:
    """The collectors that read the fleet's state (heartbeats, job rows) at scrape time."""
    from models_registry.observe.job_metrics import JobsCollector  # reads the job rows: Django must be set up
    from models_registry.observe.memory_metrics import MemoryCollector
    from models_registry.observe.poison_metrics import PoisonCollector

    return [FleetCollector(), MemoryCollector(), JobsCollector(), PoisonCollector()]


def register_collectors() -> None:
    """Add the fleet and batch job collectors to the default registry once per process."""
    global _registered
    if not _registered:
        for collector in _fleet_collectors():
            REGISTRY.register(collector)
        _registered = True


def scraped_registry() -> CollectorRegistry:
    """What /metrics exposes: every web process' metrics (multiprocess mode) or this process' registry."""
    global _scraped
    directory = conf.PROMETHEUS_MULTIPROC_DIR
    if not directory:
        return REGISTRY
    if _scraped is None:
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=directory)
        for collector in _fleet_collectors():
            registry.register(collector)
        _scraped = registry
    return _scraped


def port_totals() -> dict[tuple[str, str], dict[str, float]]:
    """{(model, task): {status: requests}} answered by every web process on the port (multiprocess mode), or by
    this one alone: the dashboard's totals."""
    directory = conf.PROMETHEUS_MULTIPROC_DIR
    families = MultiProcessCollector(None, path=directory).collect() if directory else REQUESTS.collect()
    totals: dict[tuple[str, str], dict[str, float]] = {}
    for family in families:
        if family.name != "hosting_inference_requests":
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                statuses = totals.setdefault((sample.labels["model"], sample.labels["task"]), {})
                statuses[sample.labels["status"]] = statuses.get(sample.labels["status"], 0) + sample.value
    return totals
