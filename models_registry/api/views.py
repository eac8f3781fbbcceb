"""The HTTP API: inference, model listing, health and readiness (async views)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import wraps
from typing import Any

from channels.layers import get_channel_layer
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from models_registry.api import hf_route, inference_route, model_memory, readiness
from models_registry.api.answer import to_django
from models_registry.api.call import from_django
from models_registry.api.error_answers import error_response
from models_registry.broker import admission
from models_registry.core import sources
from models_registry.core.errors import HostingError, MethodNotAllowed, NotFound, internal_error
from models_registry.core.model_state import ModelState, shown_state
from models_registry.core.task_key import TaskKey
from models_registry.policy import auth
from models_registry.registry import lookups
from models_registry.registry.rollout import split_wire
from models_registry.registry.specs import ModelSpec

logger = logging.getLogger("models_registry.requests")

AsyncView = Callable[..., Awaitable[HttpResponse]]


def api_view(
    *methods: str,
    allowed: tuple[str, ...] = (),
    render: Callable[[HostingError, str | None], HttpResponse] = error_response,
) -> Callable[[AsyncView], AsyncView]:
    """Allow only methods, and turn every error into a JSON answer (never a trace).

    allowed: what a 405's Allow header lists, when the view itself refuses some of methods.
    render: the error shape (api.error_answers' by default; the OpenAI routes pass their own).
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
                return render(internal_error(request_id), request_id)

        return csrf_exempt(wrapper)

    return decorate


@api_view("POST", "GET")
async def model_endpoint(request: HttpRequest, name: str) -> HttpResponse:
    """POST: inference on the model's default task. GET: the model's details."""
    if request.method == "GET":
        return await model_detail(request, name)
    return to_django(await inference_route.serve(hf_route.ROUTE, from_django(request), {"name": name}))


@api_view("POST", "GET", allowed=("POST",))
async def model_task_endpoint(request: HttpRequest, name: str, task: str) -> HttpResponse:
    """POST: inference on a named task."""
    if request.method == "GET":
        raise MethodNotAllowed("use POST for inference", headers={"Allow": "POST"})
    return to_django(await inference_route.serve(hf_route.ROUTE, from_django(request), {"name": name, "task": task}))


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
    """What a worker's load check chose for the embedding forwards (the reason: admin), int8's cosine, dtype auto's choice."""
    state = state or {}
    shown = {"active_backend": state.get("backend", "")}
    if "int8_cosine" in state:
        shown["int8_cosine"] = state["int8_cosine"]
    # dtype auto's choice and the probe's figures (inference.half_precision): no local paths in them.
    for key in ("active_dtype", "dtype_reason", "half_min_cosine"):
        if key in state:
            shown[key] = state[key]
    return shown


@api_view("GET")
async def model_list(request: HttpRequest) -> HttpResponse:
    """Every registered model this token may use, with its tasks and live state."""
    grant = await auth.authorize(request.headers.get("Authorization"), None)
    specs = await lookups.get_specs()
    view = await lookups.get_workers()
    states, workers = view.model_states, view.workers
    return JsonResponse({"models": [_model_summary(s, states.get(n))
                                    | model_memory.placement(workers, lookups.answering(s, view))
                                    for n, s in specs.items() if grant is None or grant.allows(n)]})


async def model_detail(request: HttpRequest, name: str) -> HttpResponse:
    """One model with its tasks' settings and live queue depth."""
    await auth.authorize(request.headers.get("Authorization"), name)
    specs = await lookups.get_specs()
    spec = specs.get(name)
    if spec is None:
        raise NotFound(f"no model named {name!r}; GET /models lists them")
    workers = await lookups.get_workers()
    wire = lookups.answering(spec, workers)  # workers report each version by its wire name
    summary = _model_summary(spec, workers.model_states.get(name)) | model_memory.placement(workers.workers, wire)
    if spec.version:
        summary["version"] = split_wire(wire)[1]
    depths = {t: await _pending_items(wire, t) for t in spec.tasks}
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
            "waiting_on_workers": sum((w.queue_depths or {}).get(str(TaskKey(wire, t.name)), 0)
                                      for w in workers.workers),
            "memory": model_memory.task_memory(workers.workers, wire, t.name),
        }
        for t in spec.tasks.values()
    ]
    summary["workers"] = [
        {
            "worker": f"{w.host}:{w.pid}",
            "device": (w.models_state or {})[wire].get("device", ""),
            "state": (w.models_state or {})[wire].get("state", ""),
            "backend": (w.models_state or {})[wire].get("backend", ""),
            "served_items": (w.models_state or {})[wire].get("served", {}),
            **model_memory.worker_entry((w.models_state or {})[wire]),
            "last_seen": w.last_seen.isoformat(),
        }
        for w in workers.workers
        if wire in (w.models_state or {})
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
    request_id = getattr(request, "request_id", None)
    return error_response(internal_error(request_id), request_id)
