"""Reaching a worker: the check that one serves the model, then the hand-off at a priority class."""

from __future__ import annotations

from typing import Any

from models_registry.broker import handoff
from models_registry.broker.enqueue import ChargePlan
from models_registry.core import sources
from models_registry.core.errors import Unavailable
from models_registry.core.model_state import ModelState, servable
from models_registry.core.task_key import TaskKey
from models_registry.policy import priority
from models_registry.registry import lookups
from models_registry.registry.specs import ModelSpec, TaskSpec


async def require_serving(spec: ModelSpec, task_name: str) -> float:
    """503 at once when no live worker can answer; else the items/s the task's queue drains at."""
    if not spec.enabled:
        raise Unavailable(f"model {spec.name!r} is disabled")
    workers = await lookups.get_workers()
    state = workers.model_states.get(spec.name)
    if state is None:
        raise Unavailable(f"no live worker serves model {spec.name!r}")
    if not servable(state):
        detail = f": {sources.LOAD_FAILED}" if state.get("state") == ModelState.ERROR else ""
        raise Unavailable(f"model {spec.name!r} is {state.get('state')}{detail}")
    key = str(TaskKey(spec.name, task_name))
    # Measured cost per token: right also for a burst on an idle queue, whose drain rate reads 0.
    return workers.capacities.get(key) or workers.drain_rates.get(key, 0.0)


async def to_worker(request_id: str, spec: ModelSpec, task: TaskSpec, inputs: list[Any], parameters: dict[str, Any],
                    klass: str, charge: ChargePlan | None = None) -> handoff.InferenceResult:
    """Hand the request to a live worker at priority klass (503 at once when none serves it).

    charge: the token's rate-limit charge, made by the hand-off's one script (a 429 before anything is queued).
    """
    drain_rate = await require_serving(spec, task.name)

    async def still_served() -> bool:
        state = (await lookups.get_workers()).model_states.get(spec.name)
        return servable(state)

    return await handoff.infer(
        request_id=request_id, model=spec.name, task=task.name, inputs=inputs,
        parameters=parameters, timeout_s=task.timeout_s,
        max_queue_size=priority.queue_limit(klass, task.policy.max_queue_size, task.max_batch_queue_size),
        drain_rate=drain_rate, still_served=still_served, priority=klass, charge=charge,
    )
