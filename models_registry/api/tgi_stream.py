"""Text Generation Inference's streaming on the HF route: `"stream": true` answers server-sent events.

Each event is TGI's `data: {"index", "token": {"id", "text", "logprob", "special"},
"generated_text", "details"}`; the last carries the whole text (and, with `details`,
the finish reason and counts). Every usual error is a JSON answer before the first
byte; one after it is an `data: {"error", "error_type"}` event, as TGI sends. A client
that goes away closes the stream, and the worker stops generating at its next token.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson

from models_registry.api.answer import Answer
from models_registry.api.call import ApiCall
from models_registry.api.payloads import InferenceRequest
from models_registry.broker import stream_handoff
from models_registry.core.errors import HostingError, InvalidInput
from models_registry.observe import metrics
from models_registry.policy import dispatch, gate, priority
from models_registry.policy.auth import TokenGrant
from models_registry.catalog.specs import ModelSpec, TaskSpec

logger = logging.getLogger("models_registry.requests")

STREAM_TASKS = ("text-generation", "text2text-generation")
TGI_OPTIONS = ("details", "decoder_input_details")  # TGI parameters answered by the token-level path


def split(body: Any, task: str) -> tuple[Any, bool, dict[str, bool]]:
    """The body without TGI's own keys, whether it asks for a stream, and its TGI options (details)."""
    if not isinstance(body, dict):
        return body, False, {}
    body = dict(body)
    stream = body.pop("stream", None)
    if stream is not None and not isinstance(stream, bool):
        raise InvalidInput("'stream' must be true or false")
    if stream and task not in STREAM_TASKS:
        raise InvalidInput(f"'stream' is for {' and '.join(STREAM_TASKS)} tasks; this task is {task}")
    options: dict[str, bool] = {}
    parameters = body.get("parameters")
    if task == "text-generation" and isinstance(parameters, dict):
        parameters = dict(parameters)
        for name in TGI_OPTIONS:
            value = parameters.pop(name, None)
            if value is not None and not isinstance(value, bool):
                raise InvalidInput(f"parameter {name!r} must be true or false")
            if value:
                options[name] = True
        body["parameters"] = parameters
    return body, bool(stream), options


def _sse(data: dict[str, Any]) -> bytes:
    return b"data:" + orjson.dumps(data) + b"\n\n"


async def respond(call: ApiCall, grant: TokenGrant | None, spec: ModelSpec, task: TaskSpec,
                  parsed: InferenceRequest, options: dict[str, bool], asked_priority: str | None,
                  started: float) -> Answer:
    """Open the stream (errors raise here, before any byte) and answer its events as they come.

    The token's rate limits and priority apply as on every inference route (no response cache).
    """
    if parsed.is_batch:
        raise InvalidInput("a streamed request takes one prompt: send 'inputs' as a string, not a list")
    wire, version = await dispatch.serving_wire(spec)
    drain_rate = await dispatch.require_serving(spec, task.name, wire)
    admitted = await gate.admit_stream(grant=grant, asked_priority=asked_priority,
                                       inputs=parsed.inputs, task=task.task,
                                       parameters={**task.parameters, **parsed.parameters})
    try:
        stream = await stream_handoff.open_stream(
            model=wire, task=task.name, text=parsed.inputs[0], parameters={**parsed.parameters, **options},
            timeout_s=task.timeout_s, drain_rate=drain_rate, priority=admitted.klass,
            max_queue_size=priority.queue_limit(admitted.klass, task.policy.max_queue_size, task.max_batch_queue_size),
            client=str(grant.token_id) if grant is not None else "",
        )
    except BaseException:
        admitted.settle(0)
        raise
    first_token_s = time.perf_counter() - started

    async def events() -> AsyncIterator[bytes]:
        count, failure, gone, input_tokens = 0, None, False, 0
        try:
            async for event in stream.events():
                count += 1
                input_tokens = (event.get("details") or {}).get("input_length") or input_tokens
                if not options.get("details"):
                    event = {**event, "details": None}
                yield _sse(event)
        except HostingError as error:
            failure = error
            yield _sse({"error": error.message, "error_type": error.error_type})
        except BaseException:  # the client went away (the handler cancels the response)
            gone = True
            raise
        finally:
            stream.close()
            admitted.settle(input_tokens)
            elapsed = time.perf_counter() - started
            if failure is not None:
                metrics.observe_failure(spec.name, task.name, failure.status, failure.error_type, elapsed)
            else:
                metrics.observe_success(spec.name, task.name, elapsed, first_token_s, elapsed - first_token_s, 1)
            logger.info("request id=%s model=%s task=%s route=stream status=200 events=%d first_token_ms=%.1f "
                        "total_ms=%.1f%s", call.request_id, spec.name, task.name, count, first_token_s * 1000,
                        elapsed * 1000, f" error_type={failure.error_type}" if failure else " client_gone" if gone else "")

    headers = {
        "Cache-Control": "no-cache",
        "X-Accel-Buffering": "no",  # proxies must pass events on at once
        "X-Time-To-First-Token-Ms": f"{first_token_s * 1000:.2f}",
        **admitted.headers,
        **({"X-Model-Version": str(version)} if version else {}),
    }
    return Answer(200, headers=headers, content_type="text/event-stream", events=events())
