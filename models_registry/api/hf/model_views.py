"""GET /models and GET /models/<name>: the registered models a token may use, their tasks' settings and live state."""

from __future__ import annotations

import asyncio
import hmac
from typing import Any

from channels.layers import get_channel_layer
from django.http import HttpRequest, HttpResponse, JsonResponse

from models_registry.api.operations import model_memory
from models_registry.api.server.django_views import api_view
from models_registry.broker import admission
from models_registry.catalog import lookups, model_settings, output_shape
from models_registry.catalog.rollout import split_wire, wire_name
from models_registry.catalog.specs import ModelSpec
from models_registry.core import sources
from models_registry.core.conf import conf
from models_registry.core.errors import NotFound
from models_registry.core.model_state import ModelState, best_report, shown_state
from models_registry.core.task_key import TaskKey
from models_registry.policy import auth


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
