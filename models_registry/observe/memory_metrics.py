"""Model loads, evictions, load seconds, sizes and batch memory caps, from the workers' heartbeats at scrape time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from models_registry.observe.load_stats import LOAD_BUCKETS
from models_registry.catalog.rollout import split_wire


def _families() -> dict[str, Metric]:
    return {
        "loads": CounterMetricFamily("hosting_model_loads", "Model loads by live workers.", labels=["model"]),
        "evictions": CounterMetricFamily(
            "hosting_model_evictions", "Models unloaded to make room for another.", labels=["model"]),
        "loaded": GaugeMetricFamily("hosting_model_loaded_workers", "Live workers holding the model.", labels=["model"]),
        "bytes": GaugeMetricFamily("hosting_model_memory_bytes", "Memory the model took at load (measured).",
                                   labels=["model"]),
        "cap": GaugeMetricFamily("hosting_batch_memory_cap_tokens",
                                 "Padded tokens a batch may hold within the memory budget (least over workers).",
                                 labels=["model", "task"]),
        "predicted": GaugeMetricFamily("hosting_batch_memory_predicted_bytes",
                                       "Predicted peak bytes of the latest measured batch.", labels=["model", "task"]),
        "measured": GaugeMetricFamily("hosting_batch_memory_measured_bytes",
                                      "Measured peak bytes of the latest measured batch.", labels=["model", "task"]),
    }


class MemoryCollector(Collector):
    """The memory and placement metrics of issue 22."""

    def describe(self) -> list[Metric]:
        """The names, without samples: registering must not query the database."""
        return [*_families().values(), HistogramMetricFamily(
            "hosting_model_load_seconds", "Seconds from the start of a load to ready.", labels=["model"])]

    def collect(self) -> Iterator[Metric]:
        from models_registry.catalog.heartbeats import live_workers

        try:
            workers = live_workers()
        except Exception:  # the database is down: never fail the scrape
            workers = []
        families = _families()
        totals: dict[str, dict[str, Any]] = {}
        caps: dict[tuple[str, str], dict[str, float]] = {}
        for worker in workers:
            for wire, report in (worker.models_state or {}).items():
                model = split_wire(wire)[0]  # a model's versions count as the model
                entry = totals.setdefault(model, {"loads": 0, "evictions": 0, "loaded": 0, "bytes": 0,
                                                  "sum": 0.0, "buckets": [0] * len(LOAD_BUCKETS)})
                entry["loads"] += int(report.get("loads", 0))
                entry["evictions"] += int(report.get("evictions", 0))
                entry["loaded"] += report.get("state") == "ready"
                entry["bytes"] = max(entry["bytes"], int(report.get("memory_bytes") or 0))
                entry["sum"] += float(report.get("load_seconds_sum", 0.0))
                for index, count in enumerate(report.get("load_seconds_buckets") or []):
                    if index < len(LOAD_BUCKETS):
                        entry["buckets"][index] += int(count)
                for task, fit in (report.get("memory") or {}).items():
                    shown = caps.setdefault((model, task), {})
                    if fit.get("cap_tokens"):
                        shown["cap"] = min(shown.get("cap", float("inf")), fit["cap_tokens"])
                    last = fit.get("last_batch") or {}
                    if last:
                        shown["predicted"] = last.get("predicted_bytes", 0.0)
                        shown["measured"] = last.get("measured_bytes", 0.0)
        seconds = HistogramMetricFamily("hosting_model_load_seconds", "Seconds from the start of a load to ready.",
                                        labels=["model"])
        for model, entry in sorted(totals.items()):
            families["loads"].add_metric([model], entry["loads"])
            families["evictions"].add_metric([model], entry["evictions"])
            families["loaded"].add_metric([model], entry["loaded"])
            families["bytes"].add_metric([model], entry["bytes"])
            buckets = [(str(bound), count) for bound, count in zip(LOAD_BUCKETS, entry["buckets"])]
            seconds.add_metric([model], buckets + [("+Inf", entry["loads"])], sum_value=entry["sum"])
        for (model, task), shown in sorted(caps.items()):
            for name in ("cap", "predicted", "measured"):
                if name in shown:
                    families[name].add_metric([model, task], shown[name])
        yield from families.values()
        yield seconds
