"""OpenTelemetry traces, exported over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set; else nothing at all.

setup() builds the SDK's TracerProvider once per process with the standard OTEL_* environment
read by the SDK itself (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER(_ARG),
OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT/HEADERS/TIMEOUT/COMPRESSION, OTEL_BSP_*): a
BatchSpanProcessor exports off the request path, each span queued as its OTLP bytes
(observe.span_export). Until then `tracer` is None and the hot paths test only that attribute
(no call, no import of opentelemetry): tracing off costs nothing.

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
_api: Any = None  # the opentelemetry.trace module once tracing is on: no import statement on the hot paths
_context: Any = None  # the opentelemetry.context module, likewise
DEFAULT_SERVICE = "model-hosting"


def setup(role: str) -> None:
    """Start exporting this process' spans (role: web, worker, job driver) when HOSTING_TRACING is on."""
    global tracer, _propagator, _api, _context
    if tracer is not None or not conf.TRACING:
        return
    from opentelemetry import context, trace
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    resource = Resource.create({"service.instance.id": f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}",
                                "process.pid": os.getpid(), "hosting.role": role})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):  # no OTEL_SERVICE_NAME
        resource = resource.merge(Resource({SERVICE_NAME: f"{DEFAULT_SERVICE}-{role.replace(' ', '-')}"}))
    provider = TracerProvider(resource=resource)  # its sampler from OTEL_TRACES_SAMPLER (default parentbased_always_on)
    provider.add_span_processor(_processor())
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("models_registry")
    _propagator = TraceContextTextMapPropagator()
    _api = trace
    _context = context
    logger.info("tracing on: %s spans of %s exported over OTLP/HTTP", role, resource.attributes.get(SERVICE_NAME))


def _processor() -> Any:
    """The SDK's BatchSpanProcessor (OTEL_BSP_* read by the SDK) and OTLP/HTTP exporter, spans encoded as they end
    (observe.span_export) where the installed exporter fits it."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from models_registry.observe.span_export import EncodedSpanExporter, EncodingSpanProcessor

    if EncodedSpanExporter.fits():
        return EncodingSpanProcessor(BatchSpanProcessor(EncodedSpanExporter()))
    logger.warning("tracing: this opentelemetry-exporter-otlp-proto-http is not the one observe.span_export was "
                   "written for; spans are queued and encoded as the SDK does (several times the CPU per span)")
    return BatchSpanProcessor(OTLPSpanExporter())


def context_of(traceparent: str, tracestate: str = "") -> Any:
    """The OpenTelemetry context a W3C traceparent (and tracestate) names; an empty one when malformed."""
    carrier = {"traceparent": traceparent, **({"tracestate": tracestate} if tracestate else {})}
    return _propagator.extract(carrier)


def current_traceparent() -> str:
    """The W3C traceparent of the current span (the web's request span), for the wire message; "" when none."""
    context = _api.get_current_span().get_span_context()  # written as the propagator's inject() writes it
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}" if context.is_valid else ""


_routes: dict[str, str] = {}  # path -> its route template: the registered models' few paths, bounded below
MAX_ROUTES = 4096


def http_route(path: str) -> str:
    """The route template of an API path (low cardinality: the span's name and http.route)."""
    route = _routes.get(path)
    if route is None:
        found = model_path(path)
        route = path if found is None else paths.openapi_path("model-task" if found[1] else "model")
        if len(_routes) >= MAX_ROUTES:  # paths of unknown models are the client's to make up: never unbounded
            _routes.clear()
        _routes[path] = route
    return route


async def serve_traced(scope: dict[str, Any], receive: Any, send: Any,
                       handle: Callable[[dict[str, Any], Any, Any], Awaitable[None]]) -> None:
    """handle(scope, receive, send) inside the request's SERVER span (a stream's: until its last event).

    What the SDK's start_as_current_span does (the span current while handle runs, an exception recorded
    and the status set to ERROR, the span ended), without its two generator context managers per request.
    """
    headers = {name: value.decode("latin-1") for name, value in scope.get("headers", ())
               if name in (b"traceparent", b"tracestate")}
    parent = context_of(headers[b"traceparent"], headers.get(b"tracestate", "")) if b"traceparent" in headers else None
    route, method = http_route(scope["path"]), scope["method"]
    span = tracer.start_span(f"{method} {route}", context=parent, kind=_api.SpanKind.SERVER, attributes={
        "http.request.method": method, "http.route": route, "url.path": scope["path"]})
    token = _context.attach(_api.set_span_in_context(span))
    try:
        if not span.is_recording():  # sampled out: the context travels on, nothing is recorded
            await handle(scope, receive, send)
            return

        async def traced_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                span.set_attribute("http.response.status_code", message["status"])
                if message["status"] >= 500:
                    span.set_status(_api.StatusCode.ERROR)
            await send(message)

        await handle(scope, receive, traced_send)
    except Exception as error:  # as the SDK's use_span: recorded, the status ERROR, raised on
        if span.is_recording():
            span.record_exception(error)
            span.set_status(_api.Status(_api.StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        raise
    finally:
        _context.detach(token)
        span.end()


def annotate(model: str, version: int, token_id: int | None, error_type: str = "", **more: Any) -> str:
    """Name what the request's span served, never the token; its trace id for the log line ("": no span records).

    request_record calls it once, with the log line. The route, method and status are the span's own
    (http.route, http.request.method, http.response.status_code: serve_traced); each attribute more is
    encoded and exported with every sampled request, so none repeats another.
    """
    span = _api.get_current_span()
    context = span.get_span_context()
    if not context.is_valid:
        return ""
    if not span.is_recording():  # sampled out: a trace id to log, nothing to record
        return f"{context.trace_id:032x}"
    attributes: dict[str, Any] = {"hosting.model": model, "hosting.model_version": version}
    if token_id is not None:
        attributes["hosting.token_id"] = token_id
    if error_type:
        attributes["error.type"] = error_type
    for name, value in more.items():
        attributes[f"hosting.{name}"] = value
    span.set_attributes(attributes)
    return f"{context.trace_id:032x}"


def _ns(epoch_s: float) -> int:
    return int(epoch_s * 1_000_000_000)


def _remote(traceparent: str) -> Any:
    """The SpanContext of a wire traceparent (current_traceparent's own format); None when malformed or empty.

    Split by hand: the worker reads one per request, and the propagator's regex and Context cost it more
    than the rest of the request's unsampled path (the wire carries no tracestate).
    """
    parts = traceparent.split("-")
    if len(parts) != 4 or parts[0] != "00" or len(parts[1]) != 32 or len(parts[2]) != 16 or len(parts[3]) != 2:
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    if not trace_id or not span_id:
        return None
    return _api.SpanContext(trace_id, span_id, is_remote=True, trace_flags=_api.TraceFlags(flags))


_dropping: tuple[Any, bool] = (None, False)  # (a sampler, whether it drops every child of an unsampled parent)


def _drops_unsampled() -> bool:
    """Whether the tracer's sampler records nothing under a remote parent that was not sampled.

    True for the parent-based samplers (the default and every parentbased_*) and always_off: the worker then
    skips such a request's spans and links outright instead of having the SDK make non-recording ones.
    Asked of the sampler itself (two trace ids, once per sampler), so a sampler that decides otherwise
    (always_on, traceidratio) still gets every request's spans to decide on.
    """
    global _dropping
    sampler = tracer.sampler
    if _dropping[0] is not sampler:
        from opentelemetry.sdk.trace.sampling import Decision

        def decision(trace_id: int) -> Any:
            parent = _api.SpanContext(trace_id, 1, is_remote=True, trace_flags=_api.TraceFlags(0))
            context = _api.set_span_in_context(_api.NonRecordingSpan(parent))
            return sampler.should_sample(context, trace_id, "inference.queue").decision

        _dropping = (sampler, all(decision(t) == Decision.DROP for t in (1, 2 ** 128 - 1)))
    return _dropping[1]


def record_batch(requests: list[tuple[str, float]], formed: float, started: float, ended: float,
                 attributes: dict[str, Any]) -> Any:
    """A computed batch's spans (times in epoch seconds), for its requests that came with a trace context.

    requests: (traceparent, arrival at this worker) of each request the batch carried. Each gets an
    inference.queue span in its own trace (arrival to the batch's start); one inference.batch span
    (formed to ended), the first traced request's child, links every traced request's span, and holds the
    forward. A request whose trace was not sampled is left out when the sampler would record nothing under it.
    Returns the batch span's context, the parent of its reply (record_reply); None when no request was traced.
    """
    drops = _drops_unsampled()
    traced = []
    for parent, arrival in requests:
        remote = _remote(parent) if parent else None
        if remote is not None and (remote.trace_flags.sampled or not drops):
            traced.append((remote, arrival))
    if not traced:
        return None
    start = _ns(started)
    queued = {"hosting.model": attributes.get("hosting.model", "")}
    contexts = [_api.set_span_in_context(_api.NonRecordingSpan(remote)) for remote, _ in traced]
    for context, (_, arrival) in zip(contexts, traced):
        tracer.start_span("inference.queue", context=context, start_time=min(_ns(arrival), start),
                          attributes=queued).end(end_time=start)
    batch = tracer.start_span("inference.batch", context=contexts[0], links=[_api.Link(remote) for remote, _ in traced],
                              start_time=_ns(formed), attributes=attributes)
    inside = _api.set_span_in_context(batch)
    tracer.start_span("inference.forward", context=inside, start_time=start).end(_ns(ended))
    batch.end(end_time=_ns(ended))
    return inside


def record_reply(batch: Any, replies: int, started: float, ended: float) -> None:
    """The inference.reply span of a batch (batch: record_batch's context): its replies' one round trip."""
    tracer.start_span("inference.reply", context=batch, start_time=_ns(started),
                      attributes={"hosting.replies": replies}).end(_ns(ended))
