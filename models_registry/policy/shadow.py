"""Shadow copies: a share of requests also goes to the candidate version; live alone answers the client.

The copy is sent after live's answer, at batch priority (shed before any client's
request), and its round trip and distance from live's answer are recorded: in /metrics,
and summed in Redis for the admin (every web process adds to the same sums).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Coroutine
from typing import Any

from channels.layers import get_channel_layer

from models_registry.broker import handoff, stream_handoff
from models_registry.broker.stream_handoff import Opening
from models_registry.core.errors import HostingError
from models_registry.observe.version_metrics import observe_shadow
from models_registry.policy.shadow_distance import distance
from models_registry.catalog.rollout import wire_name
from models_registry.catalog.specs import ModelSpec, TaskSpec

logger = logging.getLogger(__name__)

_background: set[asyncio.Task[Any]] = set()
SUMS_TTL_S = 30 * 86400
# (live's outputs, the copy's outputs), as policy.shadow_distance compares them
Compared = tuple[list[Any], list[Any]]


def sums_key(prefix: str, model: str, version: int) -> str:
    """The Redis hash of one shadow version's sums: n, errors, distance, seconds."""
    return f"{prefix}shadow:{model}:{version}"


def compare_soon(spec: ModelSpec, task: TaskSpec, inputs: list[Any], parameters: dict[str, Any],
                 live: handoff.InferenceResult, version: int) -> None:
    """Send a copy of the request to version in the background and record how its answer differs."""
    _in_background(_measure(spec.name, version, _copy_request(spec, task, inputs, parameters, live, version)))


def compare_streams_soon(spec: ModelSpec, task: TaskSpec, openings: list[Opening], live_texts: list[str],
                         version: int) -> None:
    """A streamed request's copy: the same openings streamed by version (at batch priority, uncharged), its
    texts compared with live's (exact match), recorded as any shadow copy."""
    _in_background(_measure(spec.name, version, _copy_streams(spec, task, openings, live_texts, version)))


def _in_background(work: Coroutine[Any, Any, None]) -> None:
    job = asyncio.ensure_future(work)
    _background.add(job)  # held: a task nobody references may be collected
    job.add_done_callback(_background.discard)


def _copy_queue_size(task: TaskSpec) -> int:
    """A copy waits in the batch queue: its own limit, or half the task's (shed before any client's request)."""
    return task.max_batch_queue_size or max(1, task.policy.max_queue_size // 2)


async def _copy_request(spec: ModelSpec, task: TaskSpec, inputs: list[Any], parameters: dict[str, Any],
                        live: handoff.InferenceResult, version: int) -> Compared:
    result = await handoff.infer(
        request_id=f"shadow-{uuid.uuid4().hex[:12]}", model=wire_name(spec.name, version), task=task.name,
        inputs=inputs, parameters=parameters, timeout_s=task.timeout_s, max_queue_size=_copy_queue_size(task),
        priority="batch",
    )
    return live.outputs, result.outputs


async def _copy_streams(spec: ModelSpec, task: TaskSpec, openings: list[Opening], live_texts: list[str],
                        version: int) -> Compared | None:
    streams = await stream_handoff.open_streams(
        openings, None, model=wire_name(spec.name, version), task=task.name, timeout_s=task.timeout_s,
        max_queue_size=_copy_queue_size(task), priority="batch", whole=True)
    try:
        for stream in streams:
            async for _ in stream.events():
                pass
    finally:
        for stream in streams:
            stream.close()
    texts = [stream.text for stream in streams]
    if None in texts:
        return None  # a stream ended without its text: counted as an error
    return [{"generated_text": t} for t in live_texts], [{"generated_text": t} for t in texts]


async def _measure(model: str, version: int, copy: Awaitable[Compared | None]) -> None:
    """Await one copy, then record its round trip and its distance from live's answer (or an error)."""
    started = time.perf_counter()
    seconds: float | None = None
    far: float | None = None
    try:
        compared = await copy
        if compared is not None:
            seconds = time.perf_counter() - started
            far = distance(*compared)
    except HostingError as error:
        logger.info("shadow copy to %s v%d failed: %s", model, version, error.message)
    except Exception:
        logger.exception("shadow copy to %s v%d failed", model, version)
    observe_shadow(model, version, seconds, far)
    await _add(model, version, seconds, far)


async def _add(model: str, version: int, seconds: float | None, far: float | None) -> None:
    layer = get_channel_layer()
    key = sums_key(layer.prefix, model, version)
    try:
        async with layer.connection(0).pipeline(transaction=False) as pipe:
            if seconds is None or far is None:
                pipe.hincrby(key, "errors", 1)
            else:
                pipe.hincrby(key, "n", 1)
                pipe.hincrbyfloat(key, "distance", far)
                pipe.hincrbyfloat(key, "seconds", seconds)
            pipe.expire(key, SUMS_TTL_S)
            await pipe.execute()
    except Exception as error:  # the sums are a report: a lost one costs nothing else
        logger.warning("could not record a shadow comparison: %s", error)


async def read_sums(model: str, version: int) -> dict[str, float]:
    """{n, errors, mean_distance, mean_ms} of one shadow version, as the admin shows them."""
    layer = get_channel_layer()
    raw = await layer.connection(0).hgetall(sums_key(layer.prefix, model, version))
    values = {(k.decode() if isinstance(k, bytes) else k): float(v) for k, v in raw.items()}
    n = values.get("n", 0.0)
    return {"n": n, "errors": values.get("errors", 0.0),
            "mean_distance": values.get("distance", 0.0) / n if n else 0.0,
            "mean_ms": 1000 * values.get("seconds", 0.0) / n if n else 0.0}
