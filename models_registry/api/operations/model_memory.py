"""Where a model is loaded and what it costs in memory, from the workers' heartbeats (GET /models, the admin)."""

from __future__ import annotations

from typing import Any

from models_registry.core.model_state import ModelState


def placement(workers: list[Any], name: str) -> dict[str, Any]:
    """{"loaded_on": ["host:pid", ...], "memory_bytes": measured size (0 unknown)} for one model."""
    loaded_on: list[str] = []
    sizes: list[int] = []
    for worker in workers:
        report = (worker.models_state or {}).get(name)
        if not report:
            continue
        if report.get("state") == ModelState.READY:
            loaded_on.append(f"{worker.host}:{worker.pid}")
        if report.get("memory_bytes"):
            sizes.append(int(report["memory_bytes"]))
    return {"loaded_on": loaded_on, "memory_bytes": max(sizes, default=0)}


def task_memory(workers: list[Any], name: str, task: str) -> dict[str, Any] | None:
    """The batch memory fit of one task from the worker that measured it most (None before any)."""
    best: dict[str, Any] | None = None
    for worker in workers:
        fit = ((worker.models_state or {}).get(name) or {}).get("memory", {}).get(task)
        if fit and (best is None or fit.get("samples", 0) > best.get("samples", 0)):
            best = fit
    return best


def worker_entry(report: dict[str, Any]) -> dict[str, Any]:
    """The memory fields of one worker's report of a model, for GET /models/<name>'s workers list."""
    return {key: report.get(key) for key in ("memory_bytes", "loads", "evictions", "recent_load_seconds", "loaded_why",
                                                 "keep_loaded")
            if key in report}
