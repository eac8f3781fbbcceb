"""The human metrics view: a staff page that polls a JSON snapshot every two seconds.

Charts and last-minute numbers come from this web process' rolling window
(models_registry.observe.traffic_window), and say so, with how many web processes share
the port; the requests answered since start are every process' (observe.metrics.port_totals,
the shared /metrics counters). Queue depths and workers come from the workers'
heartbeats; limits from the registry.
"""

from __future__ import annotations

import os
import re
import socket
import time
from pathlib import Path
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache

from models_registry.api.pipeline.error_answers import error_response
from models_registry.core.conf import conf
from models_registry.core.errors import Forbidden
from models_registry.core.model_state import best_report, shown_state
from models_registry.core.processes import pid_alive
from models_registry.core.task_key import TaskKey
from models_registry.models import WorkerHeartbeat
from models_registry.observe import media_counts, metrics, traffic_window
from models_registry.catalog.heartbeats import live_workers
from models_registry.catalog.rollout import Rollout, split_wire
from models_registry.catalog.specs import read_specs

SERIES_S = 120  # seconds of history in the charts
SUMMARY_S = 60  # the "last minute" numbers
BATCH_S = 300  # the batch-size distribution covers the whole window
POLL_MS = 2000


@never_cache
@staff_member_required
def page(request: HttpRequest) -> HttpResponse:
    """The live page; its script fetches `data` every POLL_MS."""
    context = {**admin.site.each_context(request), "is_nav_sidebar_enabled": False, "title": "Live metrics",
               "poll_ms": POLL_MS,
               "series_s": SERIES_S, "summary_s": SUMMARY_S, "batch_s": BATCH_S}
    return render(request, "models_registry/dashboard.html", context)


@never_cache
def data(request: HttpRequest) -> HttpResponse:
    """The snapshot the page draws: JSON, staff only (403 JSON rather than a login redirect)."""
    if not (request.user.is_active and request.user.is_staff):
        return error_response(Forbidden("staff login required: log in at /admin/login/"))
    return JsonResponse(snapshot())


def _worker_row(worker: WorkerHeartbeat, now: float) -> dict[str, Any]:
    return {
        "host": worker.host,
        "pid": worker.pid,
        "device": worker.device,
        "draining": worker.draining,
        "models": [
            {"name": split_wire(wire)[0], "version": split_wire(wire)[1], "state": state.get("state", ""),
             "error": state.get("error", ""), "device": state.get("device", "")}
            for wire, state in sorted((worker.models_state or {}).items())
        ],
        "queued": sum(int(v) for v in (worker.queue_depths or {}).values()),
        "last_seen": worker.last_seen.isoformat(),
        "age_s": round(max(0.0, now - worker.last_seen.timestamp()), 1),
        "started_at": worker.started_at.isoformat(),
    }


def _model_state(name: str, enabled: bool, workers: list[WorkerHeartbeat]) -> tuple[str, str]:
    """The best state any live worker reports for the model (any of its versions), as the API shows it."""
    return shown_state(enabled, best_report(state for worker in workers
                                            for wire, state in (worker.models_state or {}).items()
                                            if split_wire(wire)[0] == name))


def version_text(plan: Rollout) -> str:
    """"v2", "v2 → v3" while switching, "v2, canary v3 25%": what the dashboard shows of a model's versions."""
    if not plan.live:
        return ""
    shown = f"v{plan.live}" + (f" → v{plan.target}" if plan.target else "")
    return shown + (f", {plan.mode} v{plan.candidate} {plan.percent}%" if plan.candidate else "")


def _answered(statuses: dict[str, float]) -> dict[str, int]:
    return {"total": int(sum(statuses.values())),
            "errors": int(sum(count for status, count in statuses.items() if not status.startswith("2")))}


def web_processes() -> int:
    """Web processes that share this port's counters and are running (1 without a multiprocess directory)."""
    directory = conf.PROMETHEUS_MULTIPROC_DIR
    if not directory:
        return 1
    pids = {int(match.group(1)) for path in Path(directory).glob("*.db")
            if (match := re.search(r"_(\d+)\.db$", path.name))}
    return max(1, sum(pid_alive(pid) for pid in pids))


def snapshot(window: traffic_window.RollingWindow | None = None) -> dict[str, Any]:
    """Everything the page shows, in one JSON-safe dict (sync ORM)."""
    window = window or traffic_window.WINDOW
    now = time.time()
    specs = read_specs()
    workers = live_workers()
    depths: dict[str, int] = {}
    for worker in workers:
        for key, value in (worker.queue_depths or {}).items():
            model, task_name = TaskKey.parse(key)
            key = str(TaskKey(split_wire(model)[0], task_name))  # a version's queue counts as its model's
            depths[key] = depths.get(key, 0) + int(value)
    tasks = []
    totals = metrics.port_totals()
    for spec in specs.values():
        state, error = _model_state(spec.name, spec.enabled, workers)
        for task in spec.tasks.values():
            depth = depths.get(str(TaskKey(spec.name, task.name)), 0)
            window.record_depth(spec.name, task.name, depth)
            summary = window.summary(spec.name, task.name, SUMMARY_S)
            batches = window.batch_sizes(spec.name, task.name, BATCH_S)
            shown = traffic_window.batch_bucket(task.policy.max_batch_size) + 1  # larger batches cannot happen
            summary["batch_sizes"] = {k: v[:shown] for k, v in batches.items()}
            tasks.append({
                "model": spec.name, "task": task.name, "pipeline": task.task, "enabled": spec.enabled,
                "version": version_text(spec.rollout),
                "state": state, "error": error, "queue_depth": depth,
                "max_queue_size": task.policy.max_queue_size, "max_batch_size": task.policy.max_batch_size,
                "summary": summary, "series": window.series(spec.name, task.name, SERIES_S),
                "media": media_counts.totals(spec.name, task.name),  # files this web process accepted
                "port_requests": _answered(totals.get((spec.name, task.name), {})),
            })
    return {
        "now": now,
        "web": {"host": socket.gethostname(), "pid": os.getpid(), "processes": web_processes()},
        "workers_alive": len(workers),
        "workers": [_worker_row(w, now) for w in workers],
        "tasks": tasks,
    }
