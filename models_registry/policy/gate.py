"""The policies around one inference call: the token's limits, its priority, the response cache.

Routes call `serve`, which reaches a worker through policy.dispatch (a cache hit never does),
`open_streams` for a streamed request and `serve_here` for an answer the web computes itself.
Every charge is made by broker.enqueue's one script: with the request's admission and send,
or alone (a cached answer, /tokenize, an upload).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from channels.layers import get_channel_layer

from models_registry.broker import deferred, enqueue, stream_handoff
from models_registry.broker.handoff import InferenceResult
from models_registry.broker.stream_handoff import Opening, Stream
from models_registry.core.conf import conf
from models_registry.core.errors import HostingError, ModelDisabled
from models_registry.observe import metrics
from models_registry.policy import dispatch, priority, rate_limits, response_cache
from models_registry.policy.auth import TokenGrant
from models_registry.catalog.lookups import WorkerView
from models_registry.catalog.specs import ModelSpec, TaskSpec

logger = logging.getLogger(__name__)

BROKER_TIMEOUT_S = 1.0
CACHE_HEADER = "X-Cache"
T = TypeVar("T")


@dataclass
class Served:
    """A worker's (or the cache's) result and the headers the policies add to the answer."""

    result: InferenceResult
    headers: dict[str, str] = field(default_factory=dict)
    metered: TokenGrant | None = None  # the token charged: its request is counted with the answer's (api.request_record)


# The hand-off at a place (priority class, queue limit), with the charge to make in its script (None: none).
Send = Callable[[tuple[str, int], "enqueue.ChargePlan | None"], Awaitable[T]]


@dataclass
class Admitted:
    """A request the token's limits let through: their headers, and its charge to settle."""

    headers: dict[str, str]
    settle: Callable[[int], None]  # the input tokens it really used (0 when refused or failed)
    metered: TokenGrant | None = None  # the token charged (None: no charge), counted once the request is recorded


@dataclass
class Streams:
    """A streamed request's open streams, what its answer says of the policies, and its charge to settle."""

    streams: list[Stream]
    headers: dict[str, str]  # the token's X-RateLimit-* headers
    version: int  # the model version generating them (0: a model without versions)
    settle: Callable[[int], None]  # the tokens the whole request used, once its streams ended
    metered: TokenGrant | None = None  # the token charged, counted once the streams ended
    copy_to: int = 0  # a shadow version that gets a copy once they ended (policy.shadow), else 0


def _pass(layer: Any, grant: TokenGrant | None, charge: rate_limits.Charge | None) -> Admitted:
    def settle(tokens: int) -> None:
        """Correct the charge to the tokens used, in the next shared pipeline (broker.deferred)."""
        if charge is not None:
            deferred.writes.settle(layer, charge.keys, tokens - charge.tokens)

    return Admitted(dict(charge.headers) if charge else {}, settle, grant if charge is not None else None)


def _place(grant: TokenGrant | None, asked_priority: str | None, task: TaskSpec | None = None) -> tuple[str, int]:
    """The request's priority class and queue limit (policy.priority.place); no task: nothing is queued (limit 0)."""
    token_priority = grant.priority if grant else priority.INTERACTIVE
    if task is None:
        return priority.resolve(token_priority, asked_priority), 0
    return priority.place(token_priority, asked_priority, task.policy.max_queue_size, task.max_batch_queue_size)


def _count_unrecorded(admitted: Admitted) -> None:
    """Count a charged request that no answer records (an upload, or one that failed after a charge of its own)."""
    if admitted.metered is not None:
        metrics.observe_token(admitted.metered.name, admitted.metered.token_id, 0)


async def _charged(layer: Any, grant: TokenGrant | None, place: tuple[str, int], inputs: list[Any], task: str | None,
                   parameters: dict[str, Any] | None, send: Send[T]) -> tuple[T, Admitted]:
    """send(place, plan) with the token's charge made in the hand-off's own script (one round trip for both).

    place: the request's priority class and queue limit (policy.priority.place). The charge
    (policy.rate_limits.charged) is estimated from inputs, task and parameters; a 429 comes back
    from the script before anything was queued. The pass's settle is the caller's, once the
    request's real tokens are known.
    """
    if grant is None or not conf.RATE_LIMITS:
        return await send(place, None), _pass(layer, None, None)
    result, charge = await rate_limits.charged(layer, grant, inputs, task, parameters, partial(send, place))
    return result, _pass(layer, grant, charge)


async def _send_charged(layer: Any, grant: TokenGrant | None, place: tuple[str, int], inputs: list[Any], task: str,
                        parameters: dict[str, Any], send: Send[InferenceResult]) -> tuple[InferenceResult, Admitted]:
    """send(place, plan), charged in its own script, and the charge settled to the tokens its answer used."""
    result, admitted = await _charged(layer, grant, place, inputs, task, parameters, send)
    admitted.settle(result.tokens)
    return result, admitted


async def _charge(layer: Any, grant: TokenGrant | None, place: tuple[str, int], inputs: list[Any],
                  task: str | None = None, parameters: dict[str, Any] | None = None) -> Admitted:
    """The request's charge alone, by the enqueue script's charge part (nothing admitted or sent; 429 when spent).

    task and parameters (defaults merged): the estimate charges what the model will compute.
    Not charged nor counted when Redis does not answer: failing open costs nothing, as without
    Redis no request reaches a worker anyway, and the hand-off answers 503 with the reason.
    """
    async def charge_alone(_: tuple[str, int], plan: enqueue.ChargePlan | None) -> None:
        if plan is not None:
            status, _depth = await asyncio.wait_for(enqueue.run(layer.connection(0), plan), BROKER_TIMEOUT_S)
            if status == enqueue.RATE_REFUSED:
                raise enqueue.ChargeRefused()

    try:
        _, admitted = await _charged(layer, grant, place, inputs, task, parameters, charge_alone)
    except HostingError:
        raise
    except Exception as error:
        logger.warning("rate limits not checked: the broker did not answer (%s)", type(error).__name__)
        return _pass(layer, None, None)
    return admitted


async def charge_only(*, grant: TokenGrant | None, inputs: list[Any]) -> Admitted:
    """The token's limits for a request no worker computes (an upload): one request and its inputs' tokens."""
    admitted = await _charge(get_channel_layer(), grant, _place(grant, None), inputs)
    _count_unrecorded(admitted)  # an upload is no inference request: no answer records it
    return admitted


async def serve_here(*, grant: TokenGrant | None, inputs: list[Any],
                     compute: Callable[[], Awaitable[InferenceResult]]) -> Served:
    """The token's limits around an answer the web computes itself (/tokenize): metered like a model route."""
    admitted = await _charge(get_channel_layer(), grant, _place(grant, None), inputs)
    try:
        result = await compute()
    except BaseException:
        admitted.settle(0)  # refused or failed: it counts as a request, its tokens do not
        _count_unrecorded(admitted)
        raise
    admitted.settle(result.tokens)
    return Served(result, admitted.headers, admitted.metered)


async def open_streams(*, grant: TokenGrant | None, asked_priority: str | None, spec: ModelSpec, task: TaskSpec,
                       openings: list[Opening], inputs: list[Any], parameters: dict[str, Any],
                       workers: WorkerView) -> Streams:
    """A streamed request's streams (one per opening), charged as one request in the first one's script.

    No cache (a stream is generated for its client); the version is picked as for any request,
    canary and shadow included (dispatch.stream_target), 503 before any charge when no live worker
    serves it. inputs and parameters (the task's merged in): the estimate charged until settle.
    workers: the request's view of the live workers (catalog.lookups.snapshot).
    """
    client = str(grant.token_id) if grant is not None else ""
    wire, version, drain_rate, copy_to = dispatch.stream_target(spec, task.name, workers, client or None)

    def send(place: tuple[str, int], plan: enqueue.ChargePlan | None) -> Awaitable[list[Stream]]:
        return stream_handoff.open_streams(
            openings, plan, model=wire, task=task.name, timeout_s=task.timeout_s, drain_rate=drain_rate,
            max_queue_size=place[1], priority=place[0], client=client)

    place = _place(grant, asked_priority, task)
    merged = {**task.parameters, **parameters}
    streams, admitted = await _charged(get_channel_layer(), grant, place, inputs, task.task, merged, send)
    return Streams(streams, admitted.headers, version, admitted.settle, admitted.metered, copy_to)


async def serve(
    *,
    request_id: str,
    grant: TokenGrant | None,
    asked_priority: str | None,
    spec: ModelSpec,
    task: TaskSpec,
    inputs: list[Any],
    parameters: dict[str, Any],
    use_cache: bool = True,
    workers: WorkerView,
) -> Served:
    """Check the token's limits, answer from the cache or hand the inputs to a worker; charge what it used.

    use_cache False: compute afresh (and store the new answer), as HF's options.use_cache asks.
    workers: the request's view of the live workers (catalog.lookups.snapshot).
    """

    def send(place: tuple[str, int], plan: enqueue.ChargePlan | None) -> Awaitable[InferenceResult]:
        return dispatch.to_worker(request_id, spec, task, inputs, parameters, place, workers, plan,
                                  str(grant.token_id) if grant else None)

    layer = get_channel_layer()
    conn = layer.connection(0)
    if not spec.enabled:  # before the cache: a disabled model answers nothing, cached or not
        raise ModelDisabled(spec.name)
    merged = {**task.parameters, **parameters}
    key = response_cache.cache_key(layer.prefix, spec, task, parameters, inputs,
                                   grant.token_id if grant else None) if task.cache_ttl_s else None
    place = _place(grant, asked_priority, task)
    if key is None:  # no cache to ask first: the charge rides in the hand-off's script
        result, admitted = await _send_charged(layer, grant, place, inputs, task.task, merged, send)
        return Served(result, admitted.headers, admitted.metered)
    admitted = await _charge(layer, grant, place, inputs, task.task, merged)
    headers = admitted.headers
    try:
        if key is not None:
            hit = await _lookup(conn, key) if use_cache else None
            outcome = "hit" if hit else "miss" if use_cache else "bypass"
            metrics.CACHE_LOOKUPS.labels(spec.name, task.name, outcome).inc()
            headers[CACHE_HEADER] = "hit" if hit else "miss"
            if hit is not None:
                result = InferenceResult(outputs=hit.outputs, queue_ms=0.0, compute_ms=0.0, batch_size=0,
                                         tokens=hit.tokens, version=spec.version)  # the key holds live's source
                admitted.settle(hit.tokens)
                return Served(result, headers, admitted.metered)
        result = await send(place, None)  # charged already, before the cache was asked
    except BaseException:
        admitted.settle(0)  # refused or failed: it still counts as a request, its tokens do not
        _count_unrecorded(admitted)
        raise
    admitted.settle(result.tokens)
    if key is not None and result.version == spec.version:  # the key is the live version's: not a canary's answer
        await _store(conn, layer.prefix, key, result, task.cache_ttl_s, grant.token_id if grant else None)
    return Served(result, headers, admitted.metered)


async def _lookup(conn: Any, key: str) -> response_cache.CachedResult | None:
    try:
        return await asyncio.wait_for(response_cache.lookup(conn, key), BROKER_TIMEOUT_S)
    except Exception as error:  # a cache that cannot answer is a miss, not a failed request
        logger.warning("response cache lookup failed: %s", error)
        return None


async def _store(conn: Any, prefix: str, key: str, result: InferenceResult, ttl_s: int, owner: int | None) -> None:
    caps = response_cache.Caps(conf.CACHE_MAX_ENTRY_BYTES, conf.CACHE_MAX_TOKEN_BYTES, conf.CACHE_MAX_BYTES)
    try:
        await asyncio.wait_for(response_cache.store(
            conn, prefix, key, result.outputs, result.tokens, ttl_s, caps, owner,
        ), BROKER_TIMEOUT_S)
    except Exception as error:
        logger.warning("response cache store failed: %s", error)
