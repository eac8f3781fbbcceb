"""The refusals the API's front door gives from a request's headers alone, before it reads any of the body.

One stage, in this order, each answered as cheaply as it can be:

- a Host header this server does not answer for (ALLOWED_HOSTS, api.server.hosts) on an inference route
  (api.server.route_table), which the front door serves without Django's request: 400, before its body is
  read (Django's own paths check it in api.server.middleware). The route matched travels on in the verdict;
- a queue known full (broker.queue_state): a POST to an HF route (`/models/<name>[/<task>]`)
  whose task this process saw refused at its limit a moment ago is answered `503 overloaded`
  with the refusal's Retry-After, once its token is known (cached) to be valid and allowed for
  the model: as cheap as /health, and nothing of the body is read. The broker refuses a
  version's queue by its wire name ("emb.v2"), so a versioned model is looked up by the
  version answering it;
- a Content-Length that is not a decimal number: 400 (Django would take it for 0);
- /v1/files takes bodies of up to HOSTING_BATCH_MAX_FILE_BYTES: without a valid token the 401
  comes before any of them is read; an upload over the token's storage quota (policy.file_quota)
  or past its requests_per_minute is refused the same way, and one let through is counted as a
  request of the token and holds its declared bytes of the quota until it is answered
  (api.openai.upload_route's admit: the call carries its reservation);
- a declared body over the route's limit: 413.

The front door drains what a refused request still sends (up to Refusal.drain bytes) so that
its client hears the answer instead of a broken pipe.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.http import HttpResponse

from models_registry.api.pipeline import request_record
from models_registry.api.server import route_table
from models_registry.api.openai import upload_route
from models_registry.api.pipeline.call import ApiCall
from models_registry.api.server.hosts import host_allowed
from models_registry.api.pipeline.error_answers import error_response, error_response_for
from models_registry.broker import handoff, queue_state
from models_registry.catalog import lookups
from models_registry.catalog.rollout import CANARY, wire_name
from models_registry.catalog.specs import ModelSpec
from models_registry.core import paths
from models_registry.core.conf import conf
from models_registry.core.errors import HostingError, InvalidInput, TooLarge
from models_registry.policy import auth

AUTH_FIRST = (paths.FILES_PREFIX,)  # routes with large bodies: the token is checked before the body is read
UPLOADS = paths.FILES_PREFIX  # an upload is also held to the storage quota and charged before it is read
# Of a body over the limit, up to this much more is read and dropped before the 413, so a
# client still sending it hears the answer instead of a broken pipe; a larger one is
# answered at once and its connection closed.
DRAIN_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Refusal:
    """An answer given before the body was read, and how much of the body may still be read and dropped.

    drain: None, nothing (the fast 503: the body is left to the server); else up to that many
    bytes, and unless all of it was read, the connection is closed after the answer.
    """

    response: HttpResponse
    drain: int | None = 0


def body_limit(path: str) -> int:
    """Bytes a request body may have on path: batch input files are larger than inference bodies."""
    if path.startswith(paths.FILES_PREFIX):
        return conf.BATCH_MAX_FILE_BYTES + upload_route.MULTIPART_OVERHEAD
    return conf.MAX_BODY_BYTES


def declared_length(content_length: str | None) -> int | None:
    """A request's Content-Length header as a number, if it sent a well-formed one."""
    try:
        return int(content_length) if content_length is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Verdict:
    """What a request's headers decide: how large its body may be, and the refusal when they rule it out."""

    limit: int  # bytes its body may have (body_limit)
    refusal: Refusal | None = None  # None: read its body and serve it
    route: route_table.Match | None = None  # the inference route a POST calls (route_table.match); None: Django's


async def check(call: ApiCall) -> Verdict:
    """The stage's verdict on call, from its headers alone."""
    limit = body_limit(call.path)
    route = route_table.match(call.path) if call.method == "POST" else None
    if route is not None and not host_allowed(call.host, call.server):
        response = error_response(InvalidInput("this server does not answer for that Host header"), call.request_id)
        response["X-Content-Type-Options"] = "nosniff"
        return Verdict(limit, Refusal(response, drain=DRAIN_BYTES))
    full = _known_full(call) if queue_state.marks else None  # the test every request pays: nothing is marked full
    if full is not None:
        return Verdict(limit, Refusal(full, drain=None))
    try:
        _check_length(call)
        if call.path.startswith(AUTH_FIRST):
            grant = await auth.authorize(call.authorization, None)
            call.token_checked, call.grant = True, grant  # its route takes the grant from the call
            if call.method == "POST" and call.path.rstrip("/") == UPLOADS:
                call.reservation = await upload_route.admit(call, grant)  # the storage it holds till answered
    except HostingError as error:
        return Verdict(limit, Refusal(error_response_for(call.path, error, call.request_id), drain=DRAIN_BYTES))
    declared = declared_length(call.content_length)
    if declared is not None and declared > limit:
        too_large = TooLarge(f"request body is {declared} bytes; the limit is {limit}")
        return Verdict(limit, Refusal(error_response_for(call.path, too_large, call.request_id),
                                      drain=limit + DRAIN_BYTES))
    return Verdict(limit, route=route)


def _known_full(call: ApiCall) -> HttpResponse | None:
    """The 503 answer when the call's HF task is known full, else None (serve it normally)."""
    route = paths.model_path(call.path) if call.method == "POST" else None  # (model, task or None: its default)
    if route is None:
        return None
    started = time.perf_counter()
    model, task = route
    spec = (lookups.peek_specs() or {}).get(model)  # as cached: a burst never waits for the database here
    if spec is None:
        return None
    task = task or spec.default_task
    mark = _mark(spec, task)
    if mark is None:
        return None
    if not auth.known_allowed(call.authorization, model):  # a stranger learns nothing: the normal path answers 401/403
        return None
    error = handoff.queue_full(model, task, mark.depth, mark.limit, mark.retry_after_s)
    response = error_response(error, call.request_id)
    response["X-Content-Type-Options"] = "nosniff"
    request_record.failed(call.request_id, "hf", model, task, error, started, None, detail="known_full=1")
    return response


def _mark(spec: ModelSpec, task: str) -> queue_state.Full | None:
    """The mark of the queue the request would join: marks are by wire name, as the broker refuses them.

    A versioned model's is its target's or live version's, whichever was refused last (the
    one answering: the workers' view, a database read when stale, is not asked here, so the
    503 stays as cheap as /health); with a canary, only when the canary's queue is full too.
    """
    name = spec.served_as  # an adapter joins its base's queue
    if not spec.version:
        return queue_state.known_full(name, task)
    rollout = spec.rollout
    marks = [queue_state.known_full(wire_name(name, v), task) for v in (rollout.target, rollout.live) if v]
    mark = next((m for m in marks if m is not None), None)
    if mark is not None and rollout.mode == CANARY and rollout.candidate:
        return mark if queue_state.known_full(wire_name(name, rollout.candidate), task) else None
    return mark


def _check_length(call: ApiCall) -> None:
    length = call.content_length
    if length is not None and not length.strip().isdigit():
        raise InvalidInput(f"malformed Content-Length header {length[:40]!r}: send the body's size in bytes")
