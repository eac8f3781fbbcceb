"""`hosting_poison_requests_total{model,task}`: quarantined requests, read from their rows at scrape time.

A request is quarantined by a worker (whose own metrics are not scraped) after worker
deaths; the database holds every one, so each web replica reports the same count.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

POISON = ("hosting_poison_requests", "Requests in flight at two worker deaths: answered 500, never delivered again.")


class PoisonCollector(Collector):
    """Quarantined requests per model and task."""

    def describe(self) -> list[CounterMetricFamily]:
        """The name, without samples: registering must not query the database."""
        return [CounterMetricFamily(*POISON, labels=["model", "task"])]

    def collect(self) -> Iterator[CounterMetricFamily]:
        from models_registry.models import QuarantinedRequest

        family = CounterMetricFamily(*POISON, labels=["model", "task"])
        try:
            rows = list(QuarantinedRequest.objects.values("model", "task").annotate(n=Count("id")))
        except Exception:  # the database is down: never fail the scrape
            rows = []
        for row in sorted(rows, key=lambda r: (r["model"], r["task"])):
            family.add_metric([row["model"], row["task"]], row["n"])
        yield family
