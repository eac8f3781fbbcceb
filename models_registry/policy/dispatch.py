"""Reaching a worker: an admitted request handed off at its place, to the version the gate chose."""

from __future__ import annotations

from typing import Any

from models_registry.broker import handoff
from models_registry.broker.enqueue import ChargePlan
from models_registry.catalog.served_check import ServedVersion
from models_registry.catalog.specs import ModelSpec, TaskSpec
from models_registry.core.errors import HostingError
from models_registry.policy import shadow
from models_registry.policy.serving import VERSION_HEADER, Target


async def to_worker(request_id: str, spec: ModelSpec, task: TaskSpec, inputs: list[Any], parameters: dict[str, Any],
                    place: tuple[str, int], target: Target,
                    charge: ChargePlan | None = None) -> handoff.InferenceResult:
    """Hand the request to the target version's queue and await its answer.

    place: its priority class and queue limit (policy.priority.place); target: the version
    (policy.serving). charge: the token's rate-limit charge, made by the hand-off's one script
    (ChargeRefused before anything is queued). A shadow version gets a copy of the answer.
    """
    klass, queue_limit = place
    wire, version = target.wire, target.version
    try:
        result = await handoff.infer(
            request_id=request_id, model=wire, task=task.name, inputs=inputs,
            parameters=parameters, timeout_s=task.timeout_s, max_queue_size=queue_limit,
            drain_rate=target.drain_rate, served=ServedVersion(spec.served_as, wire, version), priority=klass,
            charge=charge, version=version, adapter=target.adapter_wire,
        )
    except HostingError as error:
        if version:  # a refusal or failure of one version says which
            error.headers.setdefault(VERSION_HEADER, str(version))
        raise
    if target.copy_to and not spec.base:  # a shadow compares the base's versions (an adapter's copy: a later step)
        shadow.compare_soon(spec, task, inputs, parameters, result, target.copy_to)
    return result
