"""Whether the fleet serves every model it is meant to (GET /ready's verdict), as a value: pure, from one view.

A model is meant to be served when it is enabled, has a task, and some live worker's scope takes it in
(HOSTING_WORKER_MODELS as its heartbeat says; none named: every enabled model). /ready waits for each such
model to be servable by the same rule the hand-off refuses by (policy.serving): ready on a live worker, or
loadable on demand (a count or memory limit leaves it unloaded, and its requests wait for the load instead of
a 503). A model loading at a worker's start, failed everywhere, or not yet reported by any worker holds
/ready at 503, so "is loading" never follows a ready /ready for a model it counted. Models no live worker is
meant to serve are listed, not waited for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from models_registry.catalog.lookups import WorkerView
from models_registry.catalog.specs import ModelSpec
from models_registry.core.model_state import ModelState, servable


@dataclass(frozen=True)
class FleetReadiness:
    """Every enabled model in one of four lists, by name."""

    ready: list[str]  # ready on a live worker
    on_demand: list[str]  # not loaded now; a live worker loads it for its first request, which waits
    not_ready: list[str]  # meant to be served, not servable now (loading, failed, not reported): /ready is 503
    not_served: list[str]  # no live worker is meant to serve it (scoped out, or none alive)

    @property
    def serves_all_meant(self) -> bool:
        """Whether every model the live workers are meant to serve can be served now."""
        return not self.not_ready

    @property
    def serves_any(self) -> bool:
        """Whether any enabled model can be served now."""
        return bool(self.ready or self.on_demand)


def meant(name: str, workers: Iterable[Any]) -> bool:
    """Whether some live worker (a heartbeat record) is meant to serve the model."""
    return any(not worker.serve_models or name in worker.serve_models for worker in workers)


def assess(specs: dict[str, ModelSpec], view: WorkerView) -> FleetReadiness:
    """Where each enabled model of specs stands with the live workers of view."""
    lists: dict[str, list[str]] = {"ready": [], "on_demand": [], "not_ready": [], "not_served": []}
    for name in sorted(specs):
        spec = specs[name]
        if not spec.enabled or spec.base:  # an adapter is ready where its base is (its base is listed)
            continue
        state = view.model_states.get(name)
        if (state or {}).get("state") == ModelState.READY:
            lists["ready"].append(name)
        elif servable(state):
            lists["on_demand"].append(name)
        elif spec.tasks and meant(name, view.workers):
            lists["not_ready"].append(name)
        else:
            lists["not_served"].append(name)
    return FleetReadiness(**lists)
