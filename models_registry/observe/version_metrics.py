"""Metrics of model versions: answers and latency per route and version, and shadow copies' latency and distance."""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Histogram

from models_registry.observe.metrics import LATENCY_BUCKETS

DISTANCE_BUCKETS = (0.0, 0.0001, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0)
# Label sets of the latency by route and version one process keeps: routes and models are the code's and the
# registry's few, but every registration that changes what a model computes makes a new version; past this
# many, further ones are counted under version "other" (bounded series, as token labels are).
MAX_ROUTE_SERIES = 256

VERSION_REQUESTS = Counter(
    "hosting_model_version_requests_total", "Requests answered, per model version.", ["model", "version"]
)
SHADOW_REQUESTS = Counter(
    "hosting_shadow_requests_total", "Copies of requests sent to a shadow version, by outcome (ok, error).",
    ["model", "version", "outcome"],
)
SHADOW_DURATION = Histogram(
    "hosting_shadow_request_duration_seconds", "Round trip of a shadow copy, web to worker and back.",
    ["model", "version"], buckets=LATENCY_BUCKETS,
)
SHADOW_DISTANCE = Histogram(
    "hosting_shadow_distance",
    "How far a shadow version's answer is from live's: cosine distance (vectors), label or text disagreement (0/1).",
    ["model", "version"], buckets=DISTANCE_BUCKETS,
)

ROUTE_DURATION = Histogram(
    "hosting_route_request_duration_seconds",
    "End-to-end latency of inference requests by route (hf, v1, v1-chat, rerank, ...), model and model version.",
    ["route", "model", "version"], buckets=LATENCY_BUCKETS,
)

_children: dict[tuple[str, int], Any] = {}
_route_children: dict[tuple[str, str, int], Any] = {}


def observe_version(model: str, version: int) -> None:
    """Count an answer of one version (0: a model without versions, not counted)."""
    if not version:
        return
    child = _children.get((model, version))
    if child is None:
        child = _children[(model, version)] = VERSION_REQUESTS.labels(model, str(version))
    child.inc()


def observe_route(route: str, model: str, version: int, duration_s: float) -> None:
    """A request's end-to-end latency by route, model and version (0: a model without versions), answered or not."""
    child = _route_children.get((route, model, version))
    if child is None:
        if len(_route_children) >= MAX_ROUTE_SERIES:
            ROUTE_DURATION.labels(route, model, "other").observe(duration_s)
            return
        child = _route_children[(route, model, version)] = ROUTE_DURATION.labels(route, model, str(version))
    child.observe(duration_s)


def observe_shadow(model: str, version: int, duration_s: float | None, distance: float | None) -> None:
    """Record one shadow copy: its round trip and distance, or (None, None) an error."""
    if duration_s is None or distance is None:
        SHADOW_REQUESTS.labels(model, str(version), "error").inc()
        return
    SHADOW_REQUESTS.labels(model, str(version), "ok").inc()
    SHADOW_DURATION.labels(model, str(version)).observe(duration_s)
    SHADOW_DISTANCE.labels(model, str(version)).observe(distance)
