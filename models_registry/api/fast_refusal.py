"""The 503 for a queue known full, answered before the request's body is read (as cheap as /health).

Called by the API's ASGI handler ahead of everything else: a POST to an HF inference
route (`/models/<name>[/<task>]`) whose task this process saw refused at its limit a
moment ago (broker.queue_state) is answered `503 overloaded` with the refusal's
Retry-After, once its token is known to be valid and allowed for the model. Anything
else (no mark, another route, a token that is not cached as valid) goes the normal way.
The broker refuses a version's queue by its wire name ("emb.v2"): a versioned model is
looked up by the version answering it (with versions, the marks under the model's own name
were never found, and every 503 of a burst took the full path).
"""

from __future__ import annotations

import time

from django.http import HttpResponse

from models_registry.api import request_record
from models_registry.api.call import ApiCall
from models_registry.api.error_answers import error_response
from models_registry.broker import handoff, queue_state
from models_registry.core import paths
from models_registry.policy import auth
from models_registry.catalog import lookups
from models_registry.catalog.rollout import CANARY, wire_name
from models_registry.catalog.specs import ModelSpec


def _known_full(spec: ModelSpec, task: str) -> queue_state.Full | None:
    """The mark of the queue the request would join: marks are by wire name, as the broker refuses them.

    A versioned model's is its target's or live version's, whichever was refused last (the
    one answering: the workers' view, a database read when stale, is not asked here, so the
    503 stays as cheap as /health); with a canary, only when the canary's queue is full too.
    """
    if not spec.version:
        return queue_state.known_full(spec.name, task)
    rollout = spec.rollout
    marks = [queue_state.known_full(wire_name(spec.name, v), task) for v in (rollout.target, rollout.live) if v]
    mark = next((m for m in marks if m is not None), None)
    if mark is not None and rollout.mode == CANARY and rollout.candidate:
        return mark if queue_state.known_full(wire_name(spec.name, rollout.candidate), task) else None
    return mark


async def refusal(call: ApiCall) -> HttpResponse | None:
    """The 503 answer when the call's task is known full, else None (serve it normally)."""
    if not queue_state.marks:  # the test every request pays: nothing is marked full
        return None
    route = paths.model_path(call.path) if call.method == "POST" else None  # (model, task or None: its default)
    if route is None:
        return None
    started = time.perf_counter()
    model, task = route
    spec = (lookups.peek_specs() or {}).get(model)  # as cached: a burst never waits for the database here
    if spec is None:
        return None
    task = task or spec.default_task
    mark = _known_full(spec, task)
    if mark is None:
        return None
    if not auth.known_allowed(call.authorization, model):  # a stranger learns nothing: the normal path answers 401/403
        return None
    error = handoff.queue_full(model, task, mark.depth, mark.limit, mark.retry_after_s)
    response = error_response(error, call.request_id)
    response["X-Content-Type-Options"] = "nosniff"
    request_record.failed(call.request_id, "hf", model, task, error, started, None, detail="known_full=1")
    return response
