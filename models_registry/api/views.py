"""The HTTP API: inference, model listing, health and readiness (async views)."""

from __future__ import annotations

import asyncio
import hmac
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
from models_registry.core.conf import conf
from models_registry.core.errors import HostingError, MethodNotAllowed, NotFound, internal_error
from models_registry.core.model_state import ModelState, best_report, shown_state
from models_registry.core.task_key import TaskKey
from models_registry.policy import auth
from models_registry.catalog import lookups
from models_registry.catalog import output_shape
from models_registry.catalog import model_settings
from models_registry.catalog.rollout import split_wire, wire_name
from models_registry.catalog.specs import ModelSpec

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
    adapter = spec.adapter
    return {
        "name": spec.name,
        **({"base": spec.base} if adapter is not None else {}),
        "source": sources.public_source(adapter.source if adapter is not None else spec.source),
        "revision": adapter.revision if adapter is not None else spec.revision,
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


def _is_operator(authorization: str | None) -> bool:
    """Whether the caller sees the fleet's inside (workers' host:pid, their memory and traffic).

    The operator's bearer token is HOSTING_METRICS_TOKEN; with API tokens off there are no
    tenants to keep apart. An API token, even one allowed every model, sees the model, not
    the machines or the other tenants' traffic on it (staff see those in the admin).
    """
    if not conf.REQUIRE_API_TOKEN:
        return True
    given = auth.bearer_token(authorization or "")
    expected = conf.METRICS_TOKEN
    return bool(given and expected and hmac.compare_digest(given.encode(), expected.encode()))


def _placement(workers: list[Any], name: str, operator: bool) -> dict[str, Any]:
    shown = model_memory.placement(workers, name)
    shown["loaded_workers"] = len(shown["loaded_on"])
    if not operator:
        del shown["loaded_on"]  # host:pid of each worker
    return shown


@api_view("GET")
async def model_list(request: HttpRequest) -> HttpResponse:
    """Every registered model this token may use, with its tasks and live state."""
    authorization = request.headers.get("Authorization")
    operator = _is_operator(authorization)
    grant = None if operator else await auth.authorize(authorization, None)
    specs = await lookups.get_specs()
    view = await lookups.get_workers()
    states, workers = view.model_states, view.workers
    return JsonResponse({"models": [_model_summary(s, states.get(n))
                                    | _placement(workers, lookups.answering(s, view), operator)
                                    for n, s in specs.items() if grant is None or grant.allows(n)]})


async def model_detail(request: HttpRequest, name: str) -> HttpResponse:
    """One model with its tasks' settings and live queue depth (and its workers' inside for the operator)."""
    authorization = request.headers.get("Authorization")
    operator = _is_operator(authorization)
    if not operator:
        await auth.authorize(authorization, name)
    specs = await lookups.get_specs()
    spec = specs.get(name)
    if spec is None:
        raise NotFound(f"no model named {name!r}; GET /models lists them")
    workers = await lookups.get_workers()
    wire = lookups.answering(spec, workers)  # workers report each version by its wire name
    summary = _model_summary(spec, workers.model_states.get(name)) | _placement(workers.workers, wire, operator)
    if spec.version:
        summary["version"] = split_wire(wire)[1]
        summary["versions"] = _versions(spec, workers.workers)
        failed = [v for v in summary["versions"] if v["state"] == ModelState.ERROR and v["role"] != "live"]
        if failed and not summary["error"]:  # live answers; what failed beside it still shows
            summary["error"] = "; ".join(f"v{v['version']} ({v['role']}) failed: {v['error']}" for v in failed)
    depths = {t: await _pending_items(wire, t) for t in spec.tasks}
    summary["tasks"] = [
        {
            "name": t.name,
            "task": t.task,
            "parameters": t.parameters,
            "pooling": t.pooling if t.task == "feature-extraction" else None,
            "normalize": t.normalize if t.task == "feature-extraction" else None,
            "settings": model_settings.settings_of(t),  # what is in effect and where it came from
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
    summary["workers"] = [_worker_entry(w, (w.models_state or {})[wire], operator)
                          for w in workers.workers if wire in (w.models_state or {})]
    return JsonResponse(summary)


def _versions(spec: ModelSpec, workers: list[Any]) -> list[dict[str, Any]]:
    """Each version held (live, the target of a switch, a canary or shadow) with its state over the workers.

    A version beside live that failed on any worker shows as failed (it will not take over): a
    shape refusal with its sentence, a load error as the API shows one (the admin has its text).
    """
    roles = {spec.rollout.live: "live", spec.rollout.target: "target", spec.rollout.candidate: spec.rollout.mode}
    shown = []
    for number, role in roles.items():
        if not number:
            continue
        reports = [(w.models_state or {}).get(wire_name(spec.served_as, number)) for w in workers]
        failed = [r for r in reports if r and r.get("state") == ModelState.ERROR]
        state, error = shown_state(spec.enabled, failed[0] if failed and role != "live" else best_report(reports))
        if state == ModelState.ERROR and not output_shape.public(error):
            error = sources.LOAD_FAILED
        shown.append({"version": number, "role": role, "state": state, "error": error})
    return shown


def _worker_entry(worker: Any, report: dict[str, Any], operator: bool) -> dict[str, Any]:
    """A worker holding the model: its state and backend; for the operator also which one, its memory and traffic."""
    entry = {
        "device": report.get("device", ""),
        "state": report.get("state", ""),
        "backend": report.get("backend", ""),
        "last_seen": worker.last_seen.isoformat(),
    }
    if operator:
        # served_items counts every token's traffic on a shared model; host:pid and memory are the machines'.
        entry |= {"worker": f"{worker.host}:{worker.pid}", "served_items": report.get("served", {}),
                  **model_memory.worker_entry(report)}
    return entry


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
    """200 when the database and the broker answer and every model the live workers are meant to serve is served.

    Anyone (a load balancer) gets the verdict, what is missing and how many models are in
    each state; model names only a caller whose token may use them (all of them with
    HOSTING_METRICS_TOKEN, the operator's), so that /ready does not list what a scoped
    token's GET /models hides.
    """
    report = await readiness.check(await _names_shown(request.headers.get("Authorization")))
    return JsonResponse(report, status=200 if report["status"] == "ready" else 503)


async def _names_shown(authorization: str | None) -> Callable[[str], bool] | None:
    """Which model names this caller may see (None: none)."""
    given = auth.bearer_token(authorization or "")
    if given and conf.METRICS_TOKEN and hmac.compare_digest(given.encode(), conf.METRICS_TOKEN.encode()):
        return lambda name: True
    if given is None and conf.REQUIRE_API_TOKEN:
        return None
    try:
        grant = await auth.authorize(authorization, None)
    except HostingError:
        return None  # a bad token on /ready: still the verdict, as to anyone
    return (lambda name: True) if grant is None else grant.allows


def api_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """JSON 404 for unknown routes."""
    return error_response(NotFound(f"no route {request.path}"), getattr(request, "request_id", None))


def api_server_error(request: HttpRequest) -> HttpResponse:
    """JSON 500 when Django itself fails (never a stack trace)."""
    request_id = getattr(request, "request_id", None)
    return error_response(internal_error(request_id), request_id)
