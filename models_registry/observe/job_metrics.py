"""Batch job metrics, read from the job rows at scrape time.

A job's lines run in the workers, whose own metrics are not scraped: the database holds
every job's counts, so each web replica reports the same fleet-wide numbers.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count, F, Sum
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

JOBS = ("hosting_batch_jobs", "Batch jobs by status.")
LINES = ("hosting_batch_lines", "Batch lines answered: completed (200, in the output file) or failed (error file).")
PENDING = ("hosting_batch_lines_pending", "Lines of running batch jobs not answered yet.")


class JobsCollector(Collector):
    """Jobs by status, lines answered and lines still to run."""

    def describe(self) -> list[GaugeMetricFamily | CounterMetricFamily]:
        """The names, without samples: registering must not query the database."""
        return [GaugeMetricFamily(*JOBS, labels=["status"]), CounterMetricFamily(*LINES, labels=["state"]),
                GaugeMetricFamily(*PENDING)]

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        from models_registry.models import BatchJob

        jobs = GaugeMetricFamily(*JOBS, labels=["status"])
        lines = CounterMetricFamily(*LINES, labels=["state"])
        pending = GaugeMetricFamily(*PENDING)
        try:
            rows = list(BatchJob.objects.values("status").annotate(
                jobs=Count("id"), answered=Sum("completed"), refused=Sum("failed"),
                left=Sum(F("total") - F("completed") - F("failed"))))
        except Exception:  # the database is down: never fail the scrape
            rows = []
        for row in rows:
            jobs.add_metric([row["status"]], row["jobs"])
        lines.add_metric(["completed"], sum(r["answered"] or 0 for r in rows))
        lines.add_metric(["failed"], sum(r["refused"] or 0 for r in rows))
        pending.add_metric([], sum(r["left"] or 0 for r in rows if r["status"] in BatchJob.ACTIVE))
        yield jobs
        yield lines
        yield pending
