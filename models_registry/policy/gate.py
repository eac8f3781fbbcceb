"""The policies around one inference call, as one verdict: the token's charge, its place, the cache, the version.

`admit` is the gate's one entry: it reads an Ask (whose request, what it asks of which task)
and returns an Admission, a value the hand-off sends (policy.dispatch, broker.stream_handoff)
and the route skeleton settles once the answer is in (`passed`, `failed`, `settle`, `keep`).
The token's charge rides in the hand-off's own script (broker.enqueue) when the request goes
to a worker; it is made alone, here, when a cached answer may serve it, when the web computes
the answer itself (/tokenize), or for an upload.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from channels.layers import get_channel_layer

from models_registry.broker import deferred, enqueue
from models_registry.broker.handoff import InferenceResult
from models_registry.catalog.lookups import WorkerView
from models_registry.catalog.specs import ModelSpec, TaskSpec
from models_registry.core.conf import conf
from models_registry.core.errors import ModelDisabled
from models_registry.media import item as media_item
from models_registry.observe import metrics
from models_registry.policy import charges, priority, rate_limits, response_cache, serving
from models_registry.policy.auth import TokenGrant

logger = logging.getLogger(__name__)

BROKER_TIMEOUT_S = 1.0
CACHE_HEADER = "X-Cache"


@dataclass(frozen=True)
class Ask:
    """What the gate reads of a request: whose it is and what it asks of which task.

    No spec: nothing is queued and no worker computes it (an upload); here: the web computes
    the answer itself (/tokenize); streamed: generated as streams (never cached).
    """

    grant: TokenGrant | None
    inputs: list[Any]
    spec: ModelSpec | None = None
    task: TaskSpec | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    asked_priority: str | None = None
    workers: WorkerView | None = None
    use_cache: bool = True
    streamed: bool = False
    here: bool = False
    media: media_item.MediaCount = media_item.NO_MEDIA  # the media among inputs (media.item.count)


@dataclass
class Admission:
    """The gate's verdict on a request the token's limits let through, for the hand-off to send.

    place: its priority class and queue limit; plan: the charge the hand-off's script makes
    (None: none, or made already: then charge says what); hit: the cache's answer (nothing is
    sent); cache_key: where a fresh answer is kept; target: the version that answers it.
    """

    grant: TokenGrant | None
    place: tuple[str, int]
    client: str = ""  # the API token's id: a sticky canary's key and the fair share's client ("" without one)
    plan: enqueue.ChargePlan | None = None
    charge: rate_limits.Charge | None = None
    charged_at: float = 0.0
    hit: InferenceResult | None = None
    cache_key: str | None = None
    target: serving.Target | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def metered(self) -> TokenGrant | None:
        """The token charged (None: no charge): its request is counted with the answer's (api.pipeline.request_record)."""
        return self.grant if self.plan is not None or self.charge is not None else None


@dataclass
class Served:
    """A worker's (or the cache's) result and the headers the policies add to the answer."""

    result: InferenceResult
    headers: dict[str, str] = field(default_factory=dict)
    metered: TokenGrant | None = None  # the token charged: its request is counted with the answer's


def _place(grant: TokenGrant | None, asked_priority: str | None, task: TaskSpec | None) -> tuple[str, int]:
    """The request's priority class and queue limit (policy.priority.place); no task: nothing is queued (limit 0)."""
    token_priority = grant.priority if grant else priority.INTERACTIVE
    if task is None:
        return priority.resolve(token_priority, asked_priority), 0
    return priority.place(token_priority, asked_priority, task.policy.max_queue_size, task.max_batch_queue_size)


async def admit(ask: Ask) -> Admission:
    """The request's admission: its place, its charge (planned, or made alone), the cache's verdict, its version.

    Raises what refuses it before anything is sent: 503 (disabled, no live worker), 413 (no
    window of the token could take it), 429 (a charge made alone found a limit spent).
    """
    spec, task, grant = ask.spec, ask.task, ask.grant
    if spec is not None and not spec.enabled:  # before the cache: a disabled model answers nothing, cached or not
        raise ModelDisabled(spec.name)
    queued = task if spec is not None and not ask.here else None
    admission = Admission(grant, _place(grant, ask.asked_priority, queued),
                          str(grant.token_id) if grant is not None else "")
    layer = get_channel_layer()
    if spec is None or queued is None:  # nothing is sent: charged alone, now
        await _charge_alone(layer, admission, ask)
        return admission
    assert ask.workers is not None, "a request sent to the workers is admitted with their view"
    # The cache may answer: charged alone, first. Not while an adapter's canary splits its answers between files.
    if queued.cache_ttl_s and not ask.streamed and spec.adapter_canary is None:
        await _charge_alone(layer, admission, ask)
        try:
            await _ask_cache(layer, admission, ask, spec, queued)
            if admission.hit is None:
                admission.target = serving.target(spec, queued.name, ask.workers, admission.client or None)
        except BaseException:
            failed(admission)
            raise
        return admission
    # The charge rides in the hand-off's script: the version first, so a 503 comes before any charge.
    admission.target = serving.target(spec, queued.name, ask.workers, admission.client or None)
    if grant is not None and conf.RATE_LIMITS:
        admission.charged_at = time.time()
        admission.plan = rate_limits.charge_plan(layer.prefix, grant, ask.inputs, queued.task,
                                                 {**queued.parameters, **ask.parameters}, admission.charged_at,
                                                 ask.media)
    return admission


async def _charge_alone(layer: Any, admission: Admission, ask: Ask) -> None:
    """The request's charge by the enqueue script's charge part alone (nothing admitted or sent; 429 when spent).

    Not charged nor counted when Redis does not answer: failing open costs nothing, as without
    Redis no request reaches a worker anyway, and the hand-off answers 503 with the reason.
    """
    grant, task = ask.grant, ask.task
    if grant is None or not conf.RATE_LIMITS:
        return
    now = time.time()
    parameters = {**task.parameters, **ask.parameters} if task is not None else None
    plan = rate_limits.charge_plan(layer.prefix, grant, ask.inputs, task.task if task is not None else None,
                                   parameters, now, ask.media)
    try:
        status, _depth = await asyncio.wait_for(enqueue.run(layer.connection(0), plan), BROKER_TIMEOUT_S)
    except Exception as error:
        logger.warning("rate limits not checked: the broker did not answer (%s)", type(error).__name__)
        return
    if status == enqueue.RATE_REFUSED:
        raise charges.refusal(plan, grant, now)
    admission.charge = charges.outcome(plan, grant.limits, now)
    admission.charged_at = now
    admission.headers.update(admission.charge.headers)


async def _ask_cache(layer: Any, admission: Admission, ask: Ask, spec: ModelSpec, task: TaskSpec) -> None:
    """The cache's verdict: its answer (hit), or where to keep the fresh one (a miss, or a bypass)."""
    grant = ask.grant
    key = response_cache.cache_key(layer.prefix, spec, task, ask.parameters, ask.inputs,
                                   grant.token_id if grant else None)
    admission.cache_key = key
    hit = await _lookup(layer.connection(0), key) if ask.use_cache else None
    outcome = "hit" if hit else "miss" if ask.use_cache else "bypass"
    metrics.CACHE_LOOKUPS.labels(spec.name, task.name, outcome).inc()
    admission.headers[CACHE_HEADER] = "hit" if hit else "miss"
    if hit is not None:
        admission.hit = InferenceResult(outputs=hit.outputs, queue_ms=0.0, compute_ms=0.0, batch_size=0,
                                        tokens=hit.tokens, version=spec.version)  # the key holds live's source
        settle(admission, hit.tokens)


def passed(admission: Admission) -> dict[str, str]:
    """The headers of an admission the hand-off sent: its charge's X-RateLimit-* (read from the script's outcome)."""
    if admission.plan is not None and admission.grant is not None:
        admission.charge = charges.outcome(admission.plan, admission.grant.limits, admission.charged_at)
        admission.headers.update(admission.charge.headers)
    return admission.headers


def failed(admission: Admission, error: BaseException | None = None) -> None:
    """The hand-off refused or failed the admission: a rate limit's 429 raises here; else its tokens are refunded.

    A request charged, then refused or failed, counts as a request; its tokens do not.
    """
    grant, plan = admission.grant, admission.plan
    if isinstance(error, enqueue.ChargeRefused) and plan is not None and grant is not None:
        raise charges.refusal(plan, grant, admission.charged_at) from None
    if plan is not None and plan.outcome is not None and grant is not None:
        admission.charge = charges.outcome(plan, grant.limits, admission.charged_at)
    settle(admission, 0)
    count_alone(admission)


def count_alone(admission: Admission) -> None:
    """Count a charged request that no answer records (an upload, or one refused or failed after its charge)."""
    if admission.metered is not None and admission.charge is not None:
        metrics.observe_token(admission.metered.name, admission.metered.token_id, 0)


def settle(admission: Admission, tokens: int) -> None:
    """Correct the charge to the tokens used, in the next shared pipeline (broker.deferred)."""
    charge = admission.charge
    if charge is not None and tokens != charge.tokens:
        deferred.writes.settle(get_channel_layer(), charge.keys, tokens - charge.tokens)
        admission.charge = rate_limits.Charge(charge.keys, tokens, charge.headers)


async def keep(admission: Admission, ask: Ask, result: InferenceResult) -> Served:
    """The answer served: its charge settled to its tokens, and kept in the cache when it is live's."""
    settle(admission, result.tokens)
    spec, task, key = ask.spec, ask.task, admission.cache_key
    if key is not None and spec is not None and task is not None and result.version == spec.version:
        layer = get_channel_layer()  # the key is the live version's: never a canary's answer
        await _store(layer.connection(0), layer.prefix, key, result, task.cache_ttl_s,
                     ask.grant.token_id if ask.grant else None)
    adapter = admission.target.adapter_headers() if admission.target is not None else {}
    return Served(result, {**admission.headers, **adapter}, admission.metered)


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


