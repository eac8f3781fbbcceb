"""The HTTP API: inference, model listing, health and readiness (async views)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from functools import wraps
from typing import Any

from channels.layers import get_channel_layer
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from models_registry.api import answers, dimensions, media_requests, model_memory, payloads, readiness, tgi_stream
from models_registry.api.errors import error_response
from models_registry.broker import admission, handoff
from models_registry.core import sources
from models_registry.core.conf import conf
from models_registry.core.errors import HostingError, Internal, MethodNotAllowed, NotFound, TooLarge, Unavailable
from models_registry.core.model_state import ModelState, servable, shown_state
from models_registry.core.task_key import TaskKey
from models_registry.policy import auth, gate, priority, response_cache
from models_registry.registry import lookups
from models_registry.registry.specs import ModelSpec, TaskSpec

logger = logging.getLogger("models_registry.requests")

AsyncView = Callable[..., Awaitable[HttpResponse]]


def api_view(
    *methods: str,
    allowed: tuple[str, ...] = (),
    render: Callable[[HostingError, str | None], HttpResponse] = error_response,
) -> Callable[[AsyncView], AsyncView]:
    """Allow only methods, and turn every error into a JSON answer (never a trace).

    allowed: what a 405's Allow header lists, when the view itself refuses some of methods.
    render: the error shape (api.errors' by default; the OpenAI routes pass their own).
    """

    def decorate(view: AsyncView) -> AsyncView:
        @wraps(view)
        async def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            request_id = getattr(request, "request_id", None)
            try:
                if request.method not in methods:
                    allow = ", ".join(allowed or methods)
                    raise MethodNotAllowed(f"{request.method} is not allowed here; use {allow}", headers={"Allow": allow})
                return await view(request, *args, **kwargs)
            except HostingError as error:
                return render(error, request_id)
            except Exception:
                logger.exception("unhandled error in %s (request %s)", request.path, request_id)
                return render(Internal("internal server error"), request_id)

        return csrf_exempt(wrapper)

    return decorate


async def _model_and_task(name: str, task_name: str | None) -> tuple[ModelSpec, TaskSpec]:
    specs = await lookups.get_specs()
    spec = specs.get(name)
    if spec is None:
        raise NotFound(f"no model named {name!r}; GET /models lists them")
    chosen = task_name or spec.default_task
    task = spec.tasks.get(chosen)
    if task is None:
        known = ", ".join(spec.tasks) or "none"
        raise NotFound(f"model {name!r} has no task {chosen!r}; its tasks: {known}")
    return spec, task


async def _require_serving(spec: ModelSpec, task_name: str) -> float:
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


@api_view("POST", "GET")
async def model_endpoint(request: HttpRequest, name: str) -> HttpResponse:
    """POST: inference on the model's default task. GET: the model's details."""
    if request.method == "GET":
        return await model_detail(request, name)
    return await _inference(request, name, None)


@api_view("POST", "GET", allowed=("POST",))
async def model_task_endpoint(request: HttpRequest, name: str, task: str) -> HttpResponse:
    """POST: inference on a named task."""
    if request.method == "GET":
        raise MethodNotAllowed("use POST for inference", headers={"Allow": "POST"})
    return await _inference(request, name, task)


async def _inference(request: HttpRequest, name: str, task: str | None) -> HttpResponse:
    started = time.perf_counter()
    grant = await auth.authorize(request.headers.get("Authorization"), name)
    spec, task_spec = await _model_and_task(name, task)
    try:
        response = await _infer(request, grant, spec, task_spec, started)
    except HostingError as error:
        answers.failed(request, "hf", spec.name, task_spec.name, error, started)
        raise
    return response


async def _infer(request: HttpRequest, grant: auth.TokenGrant | None, spec: ModelSpec, task_spec: TaskSpec,
                 started: float) -> HttpResponse:
    try:
        raw = request.body
    except RequestDataTooBig:
        raise TooLarge(f"request body is over the limit of {conf.MAX_BODY_BYTES} bytes") from None
    if media_requests.media_kind(task_spec.task):  # the file as the body, or base64 / data URIs in JSON
        body, parsed = await media_requests.read(raw, request.content_type or "", spec.name, task_spec)
        stream, tgi_options = False, {}
    else:
        body = payloads.parse_body(raw, request.content_type or "", conf.MAX_BODY_BYTES)
        body, stream, tgi_options = tgi_stream.split(body, task_spec.task)
        parsed = payloads.read_request(body, task_spec.task, task_spec.parameters, conf.MAX_INPUTS)
    if stream:
        return await tgi_stream.respond(request, grant, spec, task_spec, parsed, tgi_options, _require_serving, started)
    parameters, wanted_dims = {**parsed.parameters, **tgi_options}, None
    if task_spec.task == "feature-extraction":
        wanted_dims = dimensions.requested(parameters)
        dims_key = (spec.name, task_spec.name, spec.load_key())
        dimensions.check(wanted_dims, task_spec, dimensions.known_native(dims_key))
        parameters = dimensions.without_keys(parameters)
    served = await gate.serve(
        grant=grant, asked_priority=priority.asked(request.headers.get(priority.HEADER), body), spec=spec,
        task=task_spec, inputs=parsed.inputs, parameters=parameters, use_cache=response_cache.wanted(body),
        send=lambda klass: send_to_worker(request, spec, task_spec, parsed.inputs, parameters, klass),
    )
    result = served.result
    outputs = result.outputs
    if task_spec.task == "feature-extraction":
        outputs = dimensions.shorten(outputs, wanted_dims, task_spec, dims_key,
                                     dimensions.effective_normalize(task_spec, parsed.parameters))
    body = payloads.shape_response(task_spec.task, outputs, parsed.is_batch)
    return answers.served_answer(request, "hf", spec.name, task_spec.name, body, served, len(parsed.inputs), started)


async def send_to_worker(request: HttpRequest, spec: ModelSpec, task_spec: TaskSpec, inputs: list[Any],
                         parameters: dict[str, Any], klass: str) -> handoff.InferenceResult:
    """Hand the request to a live worker at priority klass (503 at once when none serves it)."""
    drain_rate = await _require_serving(spec, task_spec.name)

    async def still_served() -> bool:
        state = (await lookups.get_workers()).model_states.get(spec.name)
        return servable(state)

    return await handoff.infer(
        request_id=request.request_id, model=spec.name, task=task_spec.name, inputs=inputs,
        parameters=parameters, timeout_s=task_spec.timeout_s,
        max_queue_size=priority.queue_limit(klass, task_spec.policy.max_queue_size, task_spec.max_batch_queue_size),
        drain_rate=drain_rate, still_served=still_served, priority=klass,
    )


def _model_summary(spec: ModelSpec, state: dict[str, str] | None) -> dict[str, Any]:
    """What API clients see of a model: no local path, no raw load error (staff see those in the admin)."""
    status, error = shown_state(spec.enabled, state)
    if status == ModelState.ERROR:
        error = sources.LOAD_FAILED
    return {
        "name": spec.name,
        "source": sources.public_source(spec.source),
        "revision": spec.revision,
        "device": spec.device,
        "dtype": spec.dtype,
        "backend": spec.backend,
        **_active_backend(state),
        "enabled": spec.enabled,
        "state": status,
        "error": error,
        "default_task": spec.default_task,
        "tasks": list(spec.tasks),
    }


def _active_backend(state: dict[str, Any] | None) -> dict[str, Any]:
    """What a worker's load check chose for the embedding forwards, and int8's cosine to fp32 (the reason: admin)."""
    state = state or {}
    shown = {"active_backend": state.get("backend", "")}
    if "int8_cosine" in state:
        shown["int8_cosine"] = state["int8_cosine"]
    return shown


@api_view("GET")
async def model_list(request: HttpRequest) -> HttpResponse:
    """Every registered model this token may use, with its tasks and live state."""
    grant = await auth.authorize(request.headers.get("Authorization"), None)
    specs = await lookups.get_specs()
    view = await lookups.get_workers()
    states, workers = view.model_states, view.workers
    return JsonResponse({"models": [_model_summary(s, states.get(n)) | model_memory.placement(workers, n)
                                    for n, s in specs.items() if grant is None or grant.allows(n)]})


async def model_detail(request: HttpRequest, name: str) -> HttpResponse:
    """One model with its tasks' settings and live queue depth."""
    await auth.authorize(request.headers.get("Authorization"), name)
    specs = await lookups.get_specs()
    spec = specs.get(name)
    if spec is None:
        raise NotFound(f"no model named {name!r}; GET /models lists them")
    workers = await lookups.get_workers()
    summary = _model_summary(spec, workers.model_states.get(name)) | model_memory.placement(workers.workers, name)
    depths = {t: await _pending_items(name, t) for t in spec.tasks}
    summary["tasks"] = [
        {
            "name": t.name,
            "task": t.task,
            "parameters": t.parameters,
            "pooling": t.pooling if t.task == "feature-extraction" else None,
            "normalize": t.normalize if t.task == "feature-extraction" else None,
            "max_batch_size": t.policy.max_batch_size,
            "max_batch_tokens": t.policy.max_batch_tokens,
            "max_batch_delay_ms": round(t.policy.max_batch_delay_s * 1000),
            "max_queue_size": t.policy.max_queue_size,
            "timeout_s": t.timeout_s,
            "max_batch_queue_size": t.max_batch_queue_size,
            "cache_ttl_s": t.cache_ttl_s,
            "queue_depth": depths.get(t.name, -1),  # admitted, not yet answered (-1: broker down)
            "waiting_on_workers": sum((w.queue_depths or {}).get(str(TaskKey(name, t.name)), 0) for w in workers.workers),
            "memory": model_memory.task_memory(workers.workers, name, t.name),
        }
        for t in spec.tasks.values()
    ]
    summary["workers"] = [
        {
            "worker": f"{w.host}:{w.pid}",
            "device": (w.models_state or {})[name].get("device", ""),
            "state": (w.models_state or {})[name].get("state", ""),
            "backend": (w.models_state or {})[name].get("backend", ""),
            "served_items": (w.models_state or {})[name].get("served", {}),
            **model_memory.worker_entry((w.models_state or {})[name]),
            "last_seen": w.last_seen.isoformat(),
        }
        for w in workers.workers
        if name in (w.models_state or {})
    ]
    return JsonResponse(summary)


async def _pending_items(model: str, task: str) -> int:
    """Items admitted and not yet answered, over every worker (-1 if the broker is down)."""
    try:
        return await asyncio.wait_for(admission.depth(get_channel_layer(), model, task), 1.0)
    except Exception:
        return -1


@api_view("GET")
async def health(request: HttpRequest) -> HttpResponse:
    """Liveness of this web process: never waits on a worker or the broker."""
    return JsonResponse({"status": "ok"})


@api_view("GET")
async def ready(request: HttpRequest) -> HttpResponse:
    """200 when the database, the broker and a worker serving an enabled model answer."""
    report = await readiness.check()
    return JsonResponse(report, status=200 if report["status"] == "ready" else 503)


def api_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """JSON 404 for unknown routes."""
    return error_response(NotFound(f"no route {request.path}"), getattr(request, "request_id", None))


def api_server_error(request: HttpRequest) -> HttpResponse:
    """JSON 500 when Django itself fails (never a stack trace)."""
    return error_response(Internal("internal server error"), getattr(request, "request_id", None))
