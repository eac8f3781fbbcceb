"""Text Generation Inference's streaming on the HF route: `"stream": true` answers server-sent events.

Each event is TGI's `data: {"index", "token": {"id", "text", "logprob", "special"},
"generated_text", "details"}`, built from the worker's token events (api.hf.tgi_events);
the last carries the whole text (and, with `details`, the finish reason and counts).
Every usual error is a JSON answer before the first byte; one after it is an `data:
{"error", "error_type"}` event, as TGI sends. A client that goes away closes the stream,
and the worker stops generating at its next token.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import orjson

from models_registry.api.pipeline.inference_route import Streaming
from models_registry.api.hf.payloads import InferenceRequest
from models_registry.api.hf.tgi_events import TgiShape
from models_registry.api.pipeline.request_record import StreamTally
from models_registry.broker.stream_handoff import Opening, Stream
from models_registry.core import token_events
from models_registry.core.errors import HostingError, InvalidInput

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


def streaming(parsed: InferenceRequest, options: dict[str, bool]) -> Streaming:
    """The request's one stream, answered in TGI's events (the skeleton opens it through the gate).

    The token's rate limits and priority apply as on every inference route (no response cache).
    """
    if parsed.is_batch:
        raise InvalidInput("a streamed request takes one prompt: send 'inputs' as a string, not a list")
    return Streaming([Opening(parsed.inputs[0], {**parsed.parameters, **options})], TgiEvents(options))


class TgiEvents:
    """TGI's events of one stream; the input tokens its details count are what the token is charged."""

    log_route = "stream"
    sse = True

    def __init__(self, options: dict[str, bool]) -> None:
        self.options = options
        self.count = 0
        self.input_tokens = 0

    async def events(self, streams: list[Stream]) -> AsyncGenerator[bytes, None]:
        """Each token's event, its details shown only when asked."""
        shape = TgiShape(details=bool(self.options.get("details")))
        async for event in streams[0].events():
            summary = token_events.summary(event)
            if summary is not None:
                self.input_tokens = summary["input_length"] or self.input_tokens
            tgi = shape.event(event)
            if tgi is not None:
                self.count += 1
                yield _sse(tgi)

    def error_event(self, error: HostingError) -> bytes:
        """TGI's error event."""
        return _sse({"error": error.message, "error_type": error.error_type})

    def tally(self) -> StreamTally:
        """The input tokens, one stream, its events."""
        return StreamTally(self.input_tokens, 1, {"events": self.count}, self.input_tokens, self.count)
