"""The state of a model as workers report it, and the one rule for the best state across workers."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any


class ModelState(StrEnum):
    """Where a model stands: on a worker (loading, ready, error), or in the registry (disabled)."""

    LOADING = "loading"
    READY = "ready"
    AVAILABLE = "available"  # not loaded now; a worker loads it on the first request
    ERROR = "error"
    DISABLED = "disabled"


# A model is as available as its best worker: one ready worker serves it.
_RANK = {ModelState.READY: 4, ModelState.LOADING: 3, ModelState.AVAILABLE: 2, ModelState.ERROR: 1}
# States in which a request is accepted and waits (up to its timeout) for a worker to compute it.
SERVABLE = {ModelState.READY, ModelState.AVAILABLE}
NO_WORKER_YET = "no live worker has loaded this model yet"


def servable(report: dict[str, Any] | None) -> bool:
    """Whether a request for the model is sent on: ready somewhere, or loadable on demand (or loading on demand)."""
    state = (report or {}).get("state", "")
    return state in SERVABLE or (state == ModelState.LOADING and bool((report or {}).get("on_demand")))


def rank(report: dict[str, Any] | None) -> int:
    """How available a worker's report of a model says it is (0: no report, or an unknown state)."""
    return _RANK.get((report or {}).get("state", ""), 0)


def best_report(reports: Iterable[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The most available of the workers' reports of one model (ready over loading over error); the first wins ties."""
    best: dict[str, Any] | None = None
    for report in reports:
        if report and (best is None or rank(report) > rank(best)):
            best = report
    return best


def shown_state(enabled: bool, best: dict[str, Any] | None) -> tuple[str, str]:
    """(state, why it is not ready) as the API, the admin and the dashboard show a model."""
    if not enabled:
        return ModelState.DISABLED, ""
    if best is None:
        return ModelState.LOADING, NO_WORKER_YET
    return best.get("state") or ModelState.LOADING, best.get("error", "")
