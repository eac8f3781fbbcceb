"""OpenTelemetry traces, exported over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set; else nothing at all.

setup() builds the SDK's TracerProvider once per process with the standard OTEL_* environment
read by the SDK itself (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER(_ARG),
OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT/HEADERS/TIMEOUT/COMPRESSION, OTEL_BSP_*): a
BatchSpanProcessor exports off the request path. Until then `tracer` is None and the hot paths
test only that attribute (no call, no import of opentelemetry): tracing off costs nothing.

Spans: the web's SERVER span per API request (continuing a W3C traceparent, api.front_door);
the request's trace context travels in the wire message (broker.messages.WorkRequest.trace),
and the worker records, per request, its time in the queue and its reply, and per batch one
span linked to every request it carried, with the forward inside it (worker_spans).
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from models_registry.core import paths
from models_registry.core.conf import conf
from models_registry.core.paths import model_path

logger = logging.getLogger(__name__)

tracer: Any = None  # the process' tracer once setup() ran with tracing on
_propagator: Any = None
DEFAULT_SERVICE = "model-hosting"


def setup(role: str) -> None:
    """Start exporting this process' spans (role: web, worker, job driver) when HOSTING_TRACING is on."""
    global tracer, _propagator
    if tracer is not None or not conf.TRACING:
        return
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    resource = Resource.create({"service.instance.id": f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}",
                                "process.pid": os.getpid(), "hosting.role": role})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):  # no OTEL_SERVICE_NAME
        resource = resource.merge(Resource({SERVICE_NAME: f"{DEFAULT_SERVICE}-{role.replace(' ', '-')}"}))
    provider = TracerProvider(resource=resource)  # its sampler from OTEL_TRACES_SAMPLER (default parentbased_always_on)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("models_registry")
    _propagator = TraceContextTextMapPropagator()
    logger.info("tracing on: %s spans of %s exported over OTLP/HTTP", role, resource.attributes.get(SERVICE_NAME))


def context_of(traceparent: str, tracestate: str = "") -> Any:
    """The OpenTelemetry context a W3C traceparent (and tracestate) names; an empty one when malformed."""
    carrier = {"traceparent": traceparent, **({"tracestate": tracestate} if tracestate else {})}
    return _propagator.extract(carrier)


def current_traceparent() -> str:
    """The traceparent of the current span (the web's request span), for the wire message; "" when none."""
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get("traceparent", "")


def trace_id() -> str:
    """The current span's trace id (32 hex digits), for the log line; "" when no span records."""
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else ""


def http_route(path: str) -> str:
    """The route template of an API path (low cardinality: the span's name and http.route)."""
    found = model_path(path)
    if found is None:
        return path
    return paths.openapi_path("model-task" if found[1] else "model")


async def serve_traced(scope: dict[str, Any], receive: Any, send: Any,
                       handle: Callable[[dict[str, Any], Any, Any], Awaitable[None]]) -> None:
    """handle(scope, receive, send) inside the request's SERVER span (a stream's: until its last event)."""
    from opentelemetry.trace import SpanKind, StatusCode

    headers = {name: value.decode("latin-1") for name, value in scope.get("headers", ())
               if name in (b"traceparent", b"tracestate")}
    parent = context_of(headers.get(b"traceparent", ""), headers.get(b"tracestate", ""))
    route, method = http_route(scope["path"]), scope["method"]
    with tracer.start_as_current_span(f"{method} {route}", context=parent, kind=SpanKind.SERVER, attributes={
            "http.request.method": method, "http.route": route, "url.path": scope["path"]}) as span:
        async def traced_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                span.set_attribute("http.response.status_code", message["status"])
                if message["status"] >= 500:
                    span.set_status(StatusCode.ERROR)
            await send(message)

        await handle(scope, receive, traced_send)


def annotate(route: str, model: str, version: int, token_id: int | None, status: int, error_type: str = "",
             **more: Any) -> None:
    """Name what the request's span served (request_record calls it once, with the log line): never the token."""
    from opentelemetry import trace

    span = trace.get_current_span()
    span.set_attributes({"hosting.route": route, "hosting.model": model, "hosting.model_version": version,
                         "hosting.status": status, **({"hosting.token_id": token_id} if token_id is not None else {}),
                         **({"error.type": error_type} if error_type else {}),
                         **{f"hosting.{name}": value for name, value in more.items()}})


def _ns(epoch_s: float) -> int:
    return int(epoch_s * 1_000_000_000)


def record_batch(requests: list[tuple[str, float]], formed: float, started: float, ended: float,
                 attributes: dict[str, Any]) -> Any:
    """A computed batch's spans (times in epoch seconds), for its requests that came with a trace context.

    requests: (traceparent, arrival at this worker) of each request the batch carried. Each gets an
    inference.queue span in its own trace (arrival to the batch's start); one inference.batch span
    (formed to ended), the first request's child, links every request's span, and holds the forward.
    Returns the batch span's context, the parent of its reply (record_reply); None when no request was traced.
    """
    from opentelemetry import trace
    from opentelemetry.trace import Link

    traced = [(context_of(parent), arrival) for parent, arrival in requests if parent]
    if not traced:
        return None
    for context, arrival in traced:
        tracer.start_span("inference.queue", context=context, start_time=_ns(min(arrival, started)),
                          attributes={"hosting.model": attributes.get("hosting.model", "")}).end(end_time=_ns(started))
    links = [Link(trace.get_current_span(context).get_span_context()) for context, _ in traced]
    batch = tracer.start_span("inference.batch", context=traced[0][0], links=links, start_time=_ns(formed),
                              attributes=attributes)
    tracer.start_span("inference.forward", context=trace.set_span_in_context(batch), start_time=_ns(started),
                      attributes={"hosting.batch.size": attributes.get("hosting.batch.size", 0)}).end(_ns(ended))
    batch.end(end_time=_ns(ended))
    return trace.set_span_in_context(batch)


def record_reply(batch: Any, replies: int, started: float, ended: float) -> None:
    """The inference.reply span of a batch (batch: record_batch's context): its replies' one round trip."""
    tracer.start_span("inference.reply", context=batch, start_time=_ns(started),
                      attributes={"hosting.replies": replies}).end(_ns(ended))
