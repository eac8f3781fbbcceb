"""The version that answers a request, and the check that a live worker serves it (503 at once when none does)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from models_registry.catalog import lookups, rollout
from models_registry.catalog.specs import AdapterSpec, ModelSpec
from models_registry.core import sources
from models_registry.core.errors import Conflict, HostingError, ModelDisabled, Unavailable
from models_registry.core.model_state import ModelState, servable

VERSION_HEADER = "X-Model-Version"
ADAPTER_VERSION_HEADER = "X-Adapter-Version"  # the adapter files' version that answered (its canary's, or live's)
FIXED_GRAPH = "onnxruntime"  # a backend that serves a base only (an adapter changes the graph's layers)
LOADING_RETRY_AFTER_S = 2  # a first load takes seconds: ask again soon, not at once


@dataclass(frozen=True)
class Target:
    """The version a request goes to: its wire name (catalog.rollout), number, its queue's drain rate, its shadow."""

    wire: str
    version: int  # 0: a model without versions
    drain_rate: float  # items/s the task's queue drains at (the Retry-After of a 503)
    copy_to: int = 0  # a shadow version that gets a copy of the answer (policy.shadow), else 0
    adapter: AdapterSpec | None = None  # an adapter's request: the files that answer it (live's, or its canary's)

    @property
    def adapter_wire(self) -> str:
        """The adapter name the worker knows those files by ("": the base answers)."""
        return self.adapter.wire if self.adapter is not None else ""

    def adapter_headers(self) -> dict[str, str]:
        """The adapter files' version that answered, as a response header (none for the base)."""
        return {ADAPTER_VERSION_HEADER: str(self.adapter.version)} if self.adapter and self.adapter.version else {}

    def headers(self) -> dict[str, str]:
        """The versions that answered, as response headers."""
        return {**({VERSION_HEADER: str(self.version)} if self.version else {}), **self.adapter_headers()}


def adapter_files(spec: ModelSpec, share: float) -> AdapterSpec | None:
    """The adapter files that answer one request of an adapter entry: its canary for its share, else live's."""
    canary = spec.adapter_canary
    if canary is not None and share * 100 < canary.percent:
        return canary
    return spec.adapter


def serving_rate(spec: ModelSpec, task_name: str, wire: str, workers: lookups.WorkerView) -> float:
    """503 at once when no live worker can answer; else the items/s the task's queue drains at.

    wire: the version's wire name (catalog.rollout); empty: the version that answers the model.
    """
    if not spec.enabled:
        raise ModelDisabled(spec.name)
    state = workers.model_states.get(wire or spec.name)
    if state is None:
        raise Unavailable(f"no live worker serves model {spec.name!r}")
    if not servable(state):
        detail = f": {sources.LOAD_FAILED}" if state.get("state") == ModelState.ERROR else ""
        headers = {"Retry-After": str(LOADING_RETRY_AFTER_S)} if state.get("state") == ModelState.LOADING else None
        raise Unavailable(f"model {spec.name!r} is {state.get('state')}{detail}", headers=headers)
    key = (wire or spec.name, task_name)  # the view's tables are keyed by core.task_key.TaskKey, a tuple
    # Measured cost per token: right also for a burst on an idle queue, whose drain rate reads 0.
    return workers.capacities.get(key) or workers.drain_rates.get(key, 0.0)


def target(spec: ModelSpec, task_name: str, workers: lookups.WorkerView, sticky_key: str | None) -> Target:
    """The version that answers the request, and its queue's drain rate.

    As catalog.rollout.pick says: the canary for its share, sticky by API token when asked
    (sticky_key: the same token always meets the same side); a shadow version gets a copy
    afterwards (policy.shadow). 503 at once when no live worker serves the chosen version.
    """
    if spec.base and (spec.backend == FIXED_GRAPH or spec.dtype == "int8"):
        raise Conflict(f"{spec.name!r} is an adapter of {spec.base!r}, which runs on ONNX Runtime: that backend "
                       "serves the base only. Its operator can set the base's backend to auto or torch.")
    version, wire, copy_to = rollout.pick(spec.served_as, spec.rollout, workers.ready.get(spec.served_as, set()),
                                          sticky_key, random.random(), random.random())
    # A canary of the adapter's files splits as the base's does: by token when the base's rollout is sticky.
    share = rollout.draw(sticky_key if spec.rollout.sticky else None, random.random())
    try:
        return Target(wire, version, serving_rate(spec, task_name, wire, workers), copy_to,
                      adapter_files(spec, share) if spec.base else None)
    except HostingError as error:
        if version:  # a refusal of one version says which
            error.headers.setdefault(VERSION_HEADER, str(version))
        raise
