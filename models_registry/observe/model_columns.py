"""The model change list's placement and memory columns: where each model is loaded and what it measured."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from models_registry.core.model_state import ModelState, best_report
from models_registry.catalog.rollout import split_wire

MIB = 2**20


def live_states(workers: list[Any]) -> dict[str, dict[str, Any]]:
    """{model: {"states": [report per worker], "depth": queued items, "holders": ["host:pid" where ready],
    "versions": {number: [report per worker]}}}."""
    states: dict[str, dict[str, Any]] = {}
    for worker in workers:
        for wire, state in (worker.models_state or {}).items():  # each version by its wire name: one row per model
            model, version = split_wire(wire)
            entry = states.setdefault(model, {"states": [], "depth": 0, "holders": []})
            entry["states"].append(state)
            entry.setdefault("versions", {}).setdefault(version, []).append(state)
            holder = f"{worker.host}:{worker.pid}"
            if state.get("state") == ModelState.READY and holder not in entry["holders"]:
                entry["holders"].append(holder)
        for key, depth in (worker.queue_depths or {}).items():
            model = split_wire(key.split("/", 1)[0])[0]
            states.setdefault(model, {"states": [], "depth": 0, "holders": []})["depth"] += depth
    return states


class PlacementColumns:
    """Change-list columns of RegisteredModelAdmin, read from self._states (set once per page)."""

    _states: dict[str, dict[str, Any]]

    def _entry(self, obj: Any) -> dict[str, Any]:
        return getattr(self, "_states", {}).get(obj.name) or {"states": [], "depth": 0, "holders": []}

    @admin.display(description="loaded on")
    def loaded_on(self, obj: Any) -> str:
        """The workers holding the model now (host:pid), or whether one loads it on demand."""
        entry = self._entry(obj)
        holders = entry["holders"]
        pinned = " (kept loaded)" if obj.keep_loaded else ""
        if holders:
            shown = ", ".join(holders) if len(holders) <= 2 else f"{holders[0]} and {len(holders) - 1} more"
            return shown + pinned
        best = best_report(entry["states"]) or {}
        return ("on demand" if best.get("state") == ModelState.AVAILABLE else "-") + pinned

    @admin.display(description="memory")
    def memory(self, obj: Any) -> str:
        """The model's measured size and its batch fit's error (largest over its tasks)."""
        reports = self._entry(obj)["states"]
        size = max((int(r.get("memory_bytes") or 0) for r in reports), default=0)
        errors = [fit["max_relative_error"] for r in reports for fit in (r.get("memory") or {}).values()
                  if fit.get("max_relative_error") is not None]
        shown = f"{size / MIB:.0f} MiB" if size else "not measured"
        return shown + (f", fit ±{max(errors):.0%}" if errors else "")

    @admin.display(description="runtime")
    def runtime(self, obj: Any) -> str:
        """Device, dtype and the embedding backend the workers chose (the change page says why)."""
        best = best_report(self._entry(obj)["states"]) or {}
        backend = best.get("backend") or f"{obj.backend}?"
        return f"{obj.device or 'default'} · {obj.dtype} · {backend}"
