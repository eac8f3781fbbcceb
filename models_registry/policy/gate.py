"""The policies around one inference call: the token's limits, its priority, the response cache.

Views call `serve` with a function that reaches a worker; a cache hit never calls it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from channels.layers import get_channel_layer
from django.conf import settings

from models_registry.api.auth import TokenGrant
from models_registry.api.errors import HostingError, RateLimited, Unavailable
from models_registry.broker.handoff import InferenceResult
from models_registry.observe import metrics
from models_registry.policy import priority, rate_limits, response_cache
from models_registry.registry.specs import ModelSpec, TaskSpec

logger = logging.getLogger(__name__)

BROKER_TIMEOUT_S = 1.0
CACHE_HEADER = "X-Cache"

_background: set[asyncio.Task[Any]] = set()


@dataclass
class Served:
    """A worker's (or the cache's) result and the headers the policies add to the answer."""

    result: InferenceResult
    headers: dict[str, str] = field(default_factory=dict)


def _in_background(coro: Awaitable[Any]) -> None:
    task = asyncio.ensure_future(coro)
    _background.add(task)
    task.add_done_callback(_background.discard)


async def _settle_quietly(conn: Any, charge: rate_limits.Charge, tokens: int, grant: TokenGrant) -> None:
    if tokens:
        metrics.TOKEN_INPUT_TOKENS.labels(metrics.token_label(grant.name, grant.token_id)).inc(tokens)
    try:
        await asyncio.wait_for(rate_limits.settle(conn, charge, tokens), BROKER_TIMEOUT_S)
    except Exception as error:  # the window keeps the estimate: off by a few tokens at most
        logger.warning("could not correct a token charge: %s", error)


async def _reserve(conn: Any, prefix: str, grant: TokenGrant, tokens: int) -> rate_limits.Charge | None:
    """The request's charge; None (not counted) when Redis does not answer.

    Failing open costs nothing: without Redis no request reaches a worker anyway, and the
    hand-off answers 503 with the reason.
    """
    label = metrics.token_label(grant.name, grant.token_id)
    try:
        charge = await asyncio.wait_for(
            rate_limits.reserve(conn, prefix, grant.token_id, grant.limits, tokens),
            BROKER_TIMEOUT_S,
        )
    except RateLimited:
        metrics.RATE_LIMITED.labels(label, "rate").inc()
        raise
    except HostingError:
        metrics.RATE_LIMITED.labels(label, "size").inc()
        raise
    except Exception as error:
        logger.warning("rate limits not checked: the broker did not answer (%s)", type(error).__name__)
        return None
    metrics.TOKEN_REQUESTS.labels(label).inc()
    return charge


@dataclass
class StreamPass:
    """A request let through (streamed or not): its priority class, the limit headers, and its charge to settle."""

    klass: str
    headers: dict[str, str]
    settle: Callable[[int], None]  # the input tokens it really used (0 when refused or failed)


async def admit_stream(*, grant: TokenGrant | None, asked_priority: str | None, inputs: list[Any],
                       task: str | None = None, parameters: dict[str, Any] | None = None) -> StreamPass:
    """The token's limits for a streamed request (no cache: a stream is generated for its client)."""
    return await _admit(get_channel_layer(), grant, asked_priority, inputs, task, parameters)


async def admit_direct(*, grant: TokenGrant | None, inputs: list[Any]) -> StreamPass:
    """The token's limits for a request the web answers itself (/tokenize): metered like a model route."""
    return await _admit(get_channel_layer(), grant, None, inputs)


async def _admit(layer: Any, grant: TokenGrant | None, asked_priority: str | None, inputs: list[Any],
                 task: str | None = None, parameters: dict[str, Any] | None = None) -> StreamPass:
    """The request's priority class and its reservation against the token's limits (429 when spent).

    task and parameters (defaults merged): the estimate charges what the model will compute
    (prompts, labels, windows, new tokens), not only the inputs' length.
    """
    klass = priority.resolve(grant.priority if grant else priority.INTERACTIVE, asked_priority)
    conn = layer.connection(0)
    charge = None
    if grant is not None and settings.HOSTING_RATE_LIMITS:
        charge = await _reserve(conn, layer.prefix, grant, rate_limits.estimate_tokens(inputs, task, parameters))

    def settle(tokens: int) -> None:
        if charge is not None and grant is not None:
            _in_background(_settle_quietly(conn, charge, tokens, grant))

    return StreamPass(klass, dict(charge.headers) if charge else {}, settle)


async def serve(
    *,
    grant: TokenGrant | None,
    asked_priority: str | None,
    spec: ModelSpec,
    task: TaskSpec,
    inputs: list[Any],
    parameters: dict[str, Any],
    send: Callable[[str], Awaitable[InferenceResult]],
    use_cache: bool = True,
) -> Served:
    """Check the token's limits, answer from the cache or call send(priority); charge what it used.

    use_cache False: compute afresh (and store the new answer), as HF's options.use_cache asks.
    """
    layer = get_channel_layer()
    conn = layer.connection(0)
    if not spec.enabled:  # before the cache: a disabled model answers nothing, cached or not
        raise Unavailable(f"model {spec.name!r} is disabled")
    admitted = await _admit(layer, grant, asked_priority, inputs, task.task, {**task.parameters, **parameters})
    headers = admitted.headers
    key = response_cache.cache_key(layer.prefix, spec, task, parameters, inputs,
                                   grant.token_id if grant else None) if task.cache_ttl_s else None
    try:
        if key is not None:
            hit = await _lookup(conn, key) if use_cache else None
            outcome = "hit" if hit else "miss" if use_cache else "bypass"
            metrics.CACHE_LOOKUPS.labels(spec.name, task.name, outcome).inc()
            headers[CACHE_HEADER] = "hit" if hit else "miss"
            if hit is not None:
                result = InferenceResult(outputs=hit.outputs, queue_ms=0.0, compute_ms=0.0, batch_size=0,
                                         tokens=hit.tokens)
                admitted.settle(hit.tokens)
                return Served(result, headers)
        result = await send(admitted.klass)
    except BaseException:
        admitted.settle(0)  # refused or failed: it still counts as a request, its tokens do not
        raise
    admitted.settle(result.tokens)
    if key is not None:
        await _store(conn, key, result, task.cache_ttl_s)
    return Served(result, headers)


async def _lookup(conn: Any, key: str) -> response_cache.CachedResult | None:
    try:
        return await asyncio.wait_for(response_cache.lookup(conn, key), BROKER_TIMEOUT_S)
    except Exception as error:  # a cache that cannot answer is a miss, not a failed request
        logger.warning("response cache lookup failed: %s", error)
        return None


async def _store(conn: Any, key: str, result: InferenceResult, ttl_s: int) -> None:
    try:
        await asyncio.wait_for(response_cache.store(
            conn, key, result.outputs, result.tokens, ttl_s, settings.HOSTING_CACHE_MAX_ENTRY_BYTES,
        ), BROKER_TIMEOUT_S)
    except Exception as error:
        logger.warning("response cache store failed: %s", error)
