"""Reaching a worker: the version that answers, the check that one serves it, then the hand-off at a priority class."""

from __future__ import annotations

import random
from typing import Any

from models_registry.broker import handoff
from models_registry.broker.enqueue import ChargePlan
from models_registry.core import sources
from models_registry.core.errors import HostingError, ModelDisabled, Unavailable
from models_registry.core.model_state import ModelState, servable
from models_registry.core.task_key import TaskKey
from models_registry.policy import shadow
from models_registry.catalog import lookups, rollout
from models_registry.catalog.specs import ModelSpec, TaskSpec

VERSION_HEADER = "X-Model-Version"
LOADING_RETRY_AFTER_S = 2  # a first load takes seconds: ask again soon, not at once


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
    key = str(TaskKey(wire or spec.name, task_name))
    # Measured cost per token: right also for a burst on an idle queue, whose drain rate reads 0.
    return workers.capacities.get(key) or workers.drain_rates.get(key, 0.0)


def stream_target(spec: ModelSpec, task_name: str, workers: lookups.WorkerView,
                  sticky_key: str | None) -> tuple[str, int, float, int]:
    """(wire name, number, drain rate, shadow version or 0) of the version that generates a streamed request.

    As for any request (catalog.rollout.pick): the canary for its share, sticky by API token when
    asked; a shadow version gets a copy afterwards (policy.shadow). 503 at once when no live worker
    serves the chosen version.
    """
    version, wire, copy_to = rollout.pick(spec.name, spec.rollout, workers.ready.get(spec.name, set()),
                                          sticky_key, random.random(), random.random())
    try:
        return wire, version, serving_rate(spec, task_name, wire, workers), copy_to
    except HostingError as error:
        if version:
            error.headers.setdefault(VERSION_HEADER, str(version))
        raise


async def to_worker(request_id: str, spec: ModelSpec, task: TaskSpec, inputs: list[Any], parameters: dict[str, Any],
                    place: tuple[str, int], workers: lookups.WorkerView, charge: ChargePlan | None = None,
                    sticky_key: str | None = None) -> handoff.InferenceResult:
    """Hand the request to a live worker (503 at once when none serves it).

    place: its priority class and queue limit (policy.priority.place); workers: the request's view
    of the live workers. charge: the token's rate-limit charge, made by the hand-off's one script
    (a 429 before anything is queued). sticky_key (the API token): the same token always meets the
    same side of a sticky canary.
    """
    klass, queue_limit = place
    plan = spec.rollout
    version, wire, copy_to = rollout.pick(spec.name, plan, workers.ready.get(spec.name, set()),
                                          sticky_key, random.random(), random.random())

    async def still_served() -> bool:
        view = await lookups.get_workers()
        state = view.model_states.get(wire)
        if servable(state) or not version:
            return servable(state)
        if (state or {}).get("state") == ModelState.ERROR or not view.workers:
            return False
        # A version the registry still lists (re)loads on the workers: a rollback to the version just
        # retired sends requests there before every worker holds it again. Its queue waits for it.
        current = (await lookups.get_specs()).get(spec.name)
        return current is not None and version in current.rollout.held()

    try:
        drain_rate = serving_rate(spec, task.name, wire, workers)
        result = await handoff.infer(
            request_id=request_id, model=wire, task=task.name, inputs=inputs,
            parameters=parameters, timeout_s=task.timeout_s, max_queue_size=queue_limit,
            drain_rate=drain_rate, still_served=still_served, priority=klass, charge=charge, version=version,
        )
    except HostingError as error:
        if version:  # a refusal or failure of one version says which
            error.headers.setdefault(VERSION_HEADER, str(version))
        raise
    if copy_to:
        shadow.compare_soon(spec, task, inputs, parameters, result, copy_to)
    return result
