"""Intake: one pulled message checked against what this worker serves, before it joins a queue."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from models_registry.core import sources
from models_registry.core.errors import InvalidInput, TooLarge, Unavailable
from models_registry.core.model_state import ModelState
from models_registry.media.item import is_media
from models_registry.registry.compute_cost import is_plain_length, request_cost
from models_registry.worker.model_slots import ModelSlot


@dataclass(frozen=True)
class InferenceRequest:
    """The fields of a request message the worker needs."""

    id: str
    reply: str
    model: str
    task: str
    inputs: list[Any]
    parameters: dict[str, Any]
    deadline: float
    priority: str = "interactive"  # or "batch": served behind interactive items (batcher)
    client: str = ""  # the API token that sent it (decode batches share rows fairly among clients)

    @classmethod
    def parse(cls, message: dict[str, Any]) -> InferenceRequest | None:
        """The request in a message; None where the message is malformed (no one to answer)."""
        try:
            return cls(
                id=str(message["id"]), reply=str(message["reply"]), model=str(message["model"]),
                task=str(message["task"]), inputs=list(message["inputs"]),
                parameters=dict(message.get("parameters") or {}), deadline=float(message["deadline"]),
                priority=str(message.get("priority") or "interactive"), client=str(message.get("client") or ""),
            )
        except (KeyError, TypeError, ValueError):
            return None


def check_servable(request: InferenceRequest, slot: ModelSlot | None, draining: bool) -> ModelSlot:
    """The ready slot that will compute request; raises the HostingError to answer instead."""
    model, task = request.model, request.task
    if draining:
        raise Unavailable("this worker is shutting down")
    if slot is None:
        raise Unavailable(f"model {model!r} is not served by this worker")
    if slot.state != ModelState.READY:
        # The load error names local paths: it is for the admin (heartbeat), not the client.
        detail = f": {sources.LOAD_FAILED}" if slot.state == ModelState.ERROR else ""
        raise Unavailable(f"model {model!r} is {slot.state}{detail}")
    if task not in slot.spec.tasks:
        raise Unavailable(f"model {model!r} has no task {task!r} on this worker")
    if not request.inputs or not all(isinstance(i, (str, dict)) for i in request.inputs):
        raise InvalidInput("inputs must be a non-empty list of strings or question/context objects")
    return slot


def check_token_budget(tokens: int, limit: int) -> None:
    """413 for a request bringing more input tokens than its task takes (limit 0: no limit)."""
    if limit and tokens > limit:
        raise TooLarge(f"this request has {tokens} input tokens; the task takes at most {limit} per request "
                       "(max_request_tokens): send fewer or shorter inputs")


def computed_tokens(request: InferenceRequest, slot: ModelSlot, costs: list[int]) -> int:
    """The tokens request makes the model compute (prompts, labels, windows, new tokens); 400 for impossible windows.

    costs: each input's own tokens (counted for batching), the answer where nothing more is computed;
    media inputs cost what the model's own count says (patch tokens, encoder frames).
    """
    if any(is_media(item) for item in request.inputs):
        return sum(costs)
    task = slot.spec.tasks[request.task]
    params = {**task.parameters, **request.parameters}
    if is_plain_length(task.task, params):
        return sum(costs)  # the common case: no second tokenization
    return sum(request_cost(task.task, request.inputs, params, slot.loaded.cost_counter()))
