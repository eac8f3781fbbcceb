"""The bookkeeping every inference route shares: the 200 answer's headers, metrics and log lines."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from models_registry.api.answer import Answer, json_answer
from models_registry.core.errors import HostingError
from models_registry.observe import metrics
from models_registry.observe.version_metrics import observe_version
from models_registry.policy.dispatch import VERSION_HEADER
from models_registry.policy.auth import TokenGrant
from models_registry.policy.gate import Served

logger = logging.getLogger("models_registry.requests")


@dataclass(frozen=True)
class StreamTally:
    """What a streamed request counted once it ended: its tokens, its streams, and its log line's own fields."""

    tokens: int  # what the token is charged: prompts and generated tokens as the workers counted them
    batch: int  # how many streams generated it
    fields: dict[str, int]  # "events" (TGI), or "choices", "prompt_tokens", "completion_tokens" (OpenAI)


def served_answer(request_id: str, route: str, model: str, task: str, body: Any, served: Served, inputs: int,
                  started: float, timings: bool = True) -> Answer:
    """The JSON answer of a served request, with timing and policy headers, counted and logged.

    timings False: no queue, compute or batch headers (the web computed it: nothing was queued).
    """
    result = served.result
    answer = json_answer(body, headers={
        **({"X-Queue-Time-Ms": f"{result.queue_ms:.2f}", "X-Inference-Time-Ms": f"{result.compute_ms:.2f}",
            "X-Batch-Size": str(result.batch_size)} if timings else {}),
        **({VERSION_HEADER: str(result.version)} if result.version else {}),
        **served.headers,
    })
    elapsed = time.perf_counter() - started
    count_token(served.metered, result.tokens)
    metrics.observe_success(model, task, elapsed, result.queue_ms / 1000, result.compute_ms / 1000, result.batch_size)
    observe_version(model, result.version)
    logger.info("request id=%s model=%s version=%d task=%s route=%s status=200 inputs=%d queue_ms=%.1f "
                "compute_ms=%.1f batch=%d total_ms=%.1f", request_id, model, result.version, task, route, inputs,
                result.queue_ms, result.compute_ms, result.batch_size, elapsed * 1000)
    return answer


def count_token(metered: TokenGrant | None, tokens: int) -> None:
    """Count a request of the token it was charged to (None: not charged), and the input tokens it used."""
    if metered is not None:
        metrics.observe_token(metered.name, metered.token_id, tokens)


def failed(request_id: str, route: str, model: str, task: str, error: HostingError, started: float,
           detail: str = "") -> None:
    """Count and log a request that ends in one of the API's errors (the caller re-raises it); detail ends the line."""
    elapsed = time.perf_counter() - started
    metrics.observe_failure(model, task, error.status, error.error_type, elapsed)
    logger.info("request id=%s model=%s task=%s route=%s status=%d error_type=%s total_ms=%.1f%s", request_id,
                model, task, route, error.status, error.error_type, elapsed * 1000, f" {detail}" if detail else "")


def streamed(request_id: str, route: str, model: str, task: str, tally: StreamTally, first_token_s: float,
             started: float, failure: HostingError | None, gone: bool) -> None:
    """Count and log a streamed request once it ended (status 200: its first byte was on its way).

    failure: the error that ended it after the first byte; gone: its client went away first.
    """
    elapsed = time.perf_counter() - started
    if failure is not None:
        metrics.observe_failure(model, task, failure.status, failure.error_type, elapsed)
    else:
        metrics.observe_success(model, task, elapsed, first_token_s, elapsed - first_token_s, tally.batch)
    logger.info("request id=%s model=%s task=%s route=%s status=200 %s first_token_ms=%.1f total_ms=%.1f%s",
                request_id, model, task, route, " ".join(f"{name}={value}" for name, value in tally.fields.items()),
                first_token_s * 1000, elapsed * 1000,
                f" error_type={failure.error_type}" if failure else " client_gone" if gone else "")
