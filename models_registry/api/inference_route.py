"""The one skeleton of every inference route: authorize, read, resolve, prepare, pass the gate, answer.

The HF route (`/models/<name>[/<task>]`), OpenAI's `/v1/embeddings` and TEI's `/rerank`
differ only in how they read a body, name a model and shape an answer: each is an
InferenceRoute, and `serve` runs its steps in the order every route shares, from any
transport (the API's ASGI handler, Django's views, a batch-job line). Every error of the
hierarchy becomes the route's error answer here; nothing else ever reaches a client.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from models_registry.api import request_record
from models_registry.api.answer import Answer
from models_registry.api.call import ApiCall
from models_registry.broker.handoff import InferenceResult
from models_registry.core.errors import HostingError, MethodNotAllowed, internal_error
from models_registry.policy import auth, gate
from models_registry.catalog.specs import ModelSpec, TaskSpec

logger = logging.getLogger("models_registry.requests")

# A route that answers by itself (a stream): given the token's grant and the request's start.
Respond = Callable[[auth.TokenGrant | None, float], Awaitable[Answer]]


@dataclass
class Work:
    """What a prepared request hands to the workers, and how its result becomes the answer's body."""

    inputs: list[Any]
    parameters: dict[str, Any]
    counted_inputs: int  # as the client counts them, for the log line
    asked_priority: str | None = None
    shape: Callable[[InferenceResult], Any] | None = None  # None: the outputs as they came
    use_cache: bool = True
    respond: Respond | None = None  # set when the route answers itself (a stream) instead of the gate
    here: Callable[[], Awaitable[InferenceResult]] | None = None  # set when the web computes it (no worker)


class InferenceRoute(Protocol):
    """One route's own steps; serve() runs them."""

    label: str  # the route in logs and metrics ("hf", "v1", "rerank")

    def read(self, call: ApiCall, path: dict[str, str]) -> tuple[str, Any]:
        """(the model name the request names, what was read of it) before the model is known."""

    async def resolve(self, wanted: Any) -> tuple[ModelSpec, TaskSpec]:
        """The registered model and task the request calls (404 when none)."""

    async def prepare(self, call: ApiCall, wanted: Any, spec: ModelSpec, task: TaskSpec) -> Work:
        """The inputs and parameters for the task (400 when the request does not fit it)."""

    def error(self, error: HostingError, request_id: str) -> Answer:
        """The route's error shape."""


async def serve(route: InferenceRoute, call: ApiCall, path: dict[str, str]) -> Answer:
    """The answer to call on route: never raises, never a stack trace."""
    try:
        return await _serve(route, call, path)
    except HostingError as error:
        return route.error(error, call.request_id)
    except Exception:
        logger.exception("unhandled error in %s (request %s)", call.path, call.request_id)
        return route.error(internal_error(call.request_id), call.request_id)


async def _serve(route: InferenceRoute, call: ApiCall, path: dict[str, str]) -> Answer:
    started = time.perf_counter()
    if call.method != "POST":
        raise MethodNotAllowed(f"{call.method} is not allowed here; use POST", headers={"Allow": "POST"})
    grant = await auth.authorize(call.authorization, None, acting_token_id=call.acting_token_id)
    name, wanted = route.read(call, path)
    auth.require_allowed(grant, name)
    spec, task = await route.resolve(wanted)
    try:
        work = await route.prepare(call, wanted, spec, task)
        if work.respond is not None:
            return await work.respond(grant, started)
        if work.here is not None:
            served = await gate.serve_here(grant=grant, inputs=work.inputs, compute=work.here)
        else:
            served = await gate.serve(
                request_id=call.request_id, grant=grant, asked_priority=work.asked_priority, spec=spec, task=task,
                inputs=work.inputs, parameters=work.parameters, use_cache=work.use_cache,
            )
        body = work.shape(served.result) if work.shape is not None else served.result.outputs
    except HostingError as error:
        request_record.failed(call.request_id, route.label, spec.name, task.name, error, started)
        raise
    return request_record.served_answer(call.request_id, route.label, spec.name, task.name, body, served,
                                        work.counted_inputs, started, timings=work.here is None)
