"""The 503 for a queue known full, answered before the request's body is read (as cheap as /health).

Called by the API's ASGI handler ahead of everything else: a POST to an HF inference
route (`/models/<name>[/<task>]`) whose task this process saw refused at its limit a
moment ago (broker.queue_state) is answered `503 overloaded` with the refusal's
Retry-After, once its token is known to be valid and allowed for the model. Anything
else (no mark, another route, a token that is not cached as valid) goes the normal way.
"""

from __future__ import annotations

import time

from django.http import HttpResponse

from models_registry.api import request_record
from models_registry.api.call import ApiCall
from models_registry.api.error_answers import error_response
from models_registry.broker import handoff, queue_state
from models_registry.core import paths
from models_registry.core.errors import HostingError
from models_registry.policy import auth
from models_registry.catalog import lookups


async def refusal(call: ApiCall) -> HttpResponse | None:
    """The 503 answer when the call's task is known full, else None (serve it normally)."""
    if not queue_state.marks:  # the test every request pays: nothing is marked full
        return None
    route = paths.model_path(call.path) if call.method == "POST" else None  # (model, task or None: its default)
    if route is None:
        return None
    started = time.perf_counter()
    model, task = route
    if task is None:
        spec = (await lookups.get_specs()).get(model)
        if spec is None:
            return None
        task = spec.default_task
    mark = queue_state.known_full(model, task)
    if mark is None:
        return None
    try:  # a stranger learns nothing of the queue: the normal path answers 401/403
        await auth.authorize(call.authorization, model)
    except HostingError:
        return None
    error = handoff.queue_full(model, task, mark.depth, mark.limit, mark.retry_after_s)
    response = error_response(error, call.request_id)
    response["X-Content-Type-Options"] = "nosniff"
    request_record.failed(call.request_id, "hf", model, task, error, started, None, detail="known_full=1")
    return response
