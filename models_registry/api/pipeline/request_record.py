"""The bookkeeping every inference route shares: the 200 answer's headers, metrics, usage ledger and log lines.

token_id: whom the usage ledger counts a request against (the grant's token, 0 without one);
None leaves it out of the ledger (a refusal before the token was read).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from channels.layers import get_channel_layer

from models_registry.api.pipeline.answer import Answer, body_answer
from models_registry.broker import deferred
from models_registry.core.errors import HostingError
from models_registry.media import item as media_item
from models_registry.observe import ledger, metrics, tracing
from models_registry.observe.version_metrics import observe_route, observe_version
from models_registry.policy.serving import VERSION_HEADER
from models_registry.policy.auth import TokenGrant
from models_registry.policy.gate import Served
from models_registry.models.usage_records import ANONYMOUS_TOKEN

logger = logging.getLogger("models_registry.requests")


@dataclass(frozen=True)
class StreamTally:
    """What a streamed request counted once it ended: its tokens, its streams, and its log line's own fields."""

    tokens: int  # what the token is charged: prompts and generated tokens as the workers counted them
    batch: int  # how many streams generated it
    fields: dict[str, int]  # "events" (TGI), or "choices", "prompt_tokens", "completion_tokens" (OpenAI)
    input_tokens: int = 0  # the prompts' tokens (usage ledger)
    output_tokens: int = 0  # the generated tokens (usage ledger)


def grant_id(grant: TokenGrant | None) -> int:
    """The usage ledger's token id of a request's grant (0: served without a token)."""
    return grant.token_id if grant is not None else ANONYMOUS_TOKEN


def _count_usage(counted: dict[str, int]) -> None:
    """Add a request's ledger fields (observe.ledger.fields) to this turn's deferred writes."""
    layer = get_channel_layer()
    writes = deferred.writes
    counts = writes.counts.setdefault(layer.prefix + ledger.LIVE_KEY, {})
    for name, value in counted.items():
        counts[name] = counts.get(name, 0) + value
    if writes.idle:  # else the turn's pipeline is on its way already (a charge's settle), and takes these too
        writes.wake(layer)


def served_answer(request_id: str, route: str, model: str, task: str, body: Any, served: Served, inputs: int,
                  started: float, token_id: int, media: media_item.MediaCount = media_item.NO_MEDIA,
                  timings: bool = True) -> Answer:
    """The JSON answer of a served request, with timing and policy headers, counted and logged.

    media: the media among its inputs (the ledger counts their images and audio seconds);
    timings False: no queue, compute or batch headers (the web computed it: nothing was queued).
    """
    result = served.result
    answer = body_answer(body, headers={
        **({"X-Queue-Time-Ms": f"{result.queue_ms:.2f}", "X-Inference-Time-Ms": f"{result.compute_ms:.2f}",
            "X-Batch-Size": str(result.batch_size)} if timings else {}),
        **({VERSION_HEADER: str(result.version)} if result.version else {}),
        **served.headers,
    })
    elapsed = time.perf_counter() - started
    count_token(served.metered, result.tokens)
    share = min(1.0, inputs / result.batch_size) if result.batch_size else 0.0  # of its batch's compute
    metrics.observe_success(model, task, elapsed, result.queue_ms / 1000, result.compute_ms / 1000, result.batch_size)
    observe_version(model, result.version)
    observe_route(route, model, result.version, elapsed)
    _count_usage(ledger.fields(token_id, model, result.version, input_tokens=result.tokens,
                               compute_s=result.compute_ms / 1000 * share, media=media))
    traced = ""
    if tracing.tracer is not None:
        traced = f" trace={tracing.annotate(model, result.version, token_id, inputs=inputs)}"
    logger.info("request id=%s model=%s version=%d task=%s route=%s status=200 inputs=%d queue_ms=%.1f "
                "compute_ms=%.1f batch=%d total_ms=%.1f%s", request_id, model, result.version, task, route, inputs,
                result.queue_ms, result.compute_ms, result.batch_size, elapsed * 1000, traced)
    return answer


def count_token(metered: TokenGrant | None, tokens: int) -> None:
    """Count a request of the token it was charged to (None: not charged), and the input tokens it used."""
    if metered is not None:
        metrics.observe_token(metered.name, metered.token_id, tokens)


def failed(request_id: str, route: str, model: str, task: str, error: HostingError, started: float,
           token_id: int | None, version: int = 0, detail: str = "") -> None:
    """Count and log a request that ends in one of the API's errors (the caller re-raises it); detail ends the line.

    version: the model's live version (the one a failed request was meant for).
    """
    elapsed = time.perf_counter() - started
    if token_id is not None:
        _count_usage(ledger.fields(token_id, model, version, error=True))
    metrics.observe_failure(model, task, error.status, error.error_type, elapsed)
    observe_route(route, model, version, elapsed)
    if tracing.tracer is not None:
        detail = f"{detail} trace={tracing.annotate(model, version, token_id, error.error_type)}".strip()
    logger.info("request id=%s model=%s task=%s route=%s status=%d error_type=%s total_ms=%.1f%s", request_id,
                model, task, route, error.status, error.error_type, elapsed * 1000, f" {detail}" if detail else "")


def streamed(request_id: str, route: str, model: str, task: str, tally: StreamTally, first_token_s: float,
             started: float, failure: HostingError | None, gone: bool, token_id: int, version: int,
             metered: TokenGrant | None = None) -> None:
    """Count and log a streamed request once it ended (status 200: its first byte was on its way).

    failure: the error that ended it after the first byte; gone: its client went away first;
    metered: the token its tokens are counted against (None: not charged).
    Its compute in the ledger: the time it generated after its first token, a row of the decode batch.
    """
    elapsed = time.perf_counter() - started
    _count_usage(ledger.fields(token_id, model, version, input_tokens=tally.input_tokens,
                               output_tokens=tally.output_tokens, compute_s=max(0.0, elapsed - first_token_s),
                               error=failure is not None))
    count_token(metered, tally.tokens)
    if failure is not None:
        metrics.observe_failure(model, task, failure.status, failure.error_type, elapsed)
    else:
        metrics.observe_success(model, task, elapsed, first_token_s, elapsed - first_token_s, tally.batch)
    observe_route(route, model, version, elapsed)
    traced = ""
    if tracing.tracer is not None:
        traced = " trace=" + tracing.annotate(model, version, token_id, failure.error_type if failure else "",
                                              time_to_first_token_ms=round(first_token_s * 1000, 3),
                                              output_tokens=tally.output_tokens, input_tokens=tally.input_tokens)
    logger.info("request id=%s model=%s task=%s route=%s status=200 %s first_token_ms=%.1f total_ms=%.1f%s%s",
                request_id, model, task, route, " ".join(f"{name}={value}" for name, value in tally.fields.items()),
                first_token_s * 1000, elapsed * 1000,
                f" error_type={failure.error_type}" if failure else " client_gone" if gone else "", traced)
