"""OpenTelemetry traces, exported over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set; else nothing at all.

setup() builds the SDK's TracerProvider once per process with the standard OTEL_* environment
read by the SDK itself (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER(_ARG),
OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT/HEADERS/TIMEOUT/COMPRESSION, OTEL_BSP_*): a
BatchSpanProcessor exports off the request path, each span queued as its OTLP bytes
(observe.span_export). Until then `tracer` is None and the hot paths test only that attribute
(no call, no import of opentelemetry): tracing off costs nothing.

Our own spans are SpanRecords (observe.span_record: what a span says, without the SDK's span object), started
with the SDK tracer's sampler and ids (observe.span_recorder) and queued as the OTLP bytes the SDK's encoder
would make of them. The request's span is this module's current span (a ContextVar), not the OpenTelemetry
API's: nothing on the API path runs code that reads the API's.

Spans: the web's SERVER span per API request (continuing a W3C traceparent, api.server.front_door);
the request's trace context travels in the wire message (broker.messages.WorkRequest.trace),
and the worker records, per request, its time in the queue and its reply, and per batch one
span linked to every request it carried, with the forward inside it (worker_spans).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from models_registry.core import paths
from models_registry.core.conf import conf
from models_registry.core.paths import model_path
from models_registry.observe.trace_context import FLAGS_AT, LOW_64, pack_halves, parent_of, parse_traceparent

logger = logging.getLogger(__name__)

tracer: Any = None  # the process' SDK tracer once setup() ran with tracing on
_recorder: Any = None  # its observe.span_recorder.SpanRecorder, likewise: no import statement on the hot paths
# The request's span in this task: (trace id, span id, W3C flags, its SpanRecord or None when not sampled).
_current: ContextVar[tuple[int, int, int, Any] | None] = ContextVar("hosting_span", default=None)
DEFAULT_SERVICE = "model-hosting"


def setup(role: str) -> None:
    """Start exporting this process' spans (role: web, worker, job driver) when HOSTING_TRACING is on."""
    if tracer is not None or not conf.TRACING:
        return
    from opentelemetry import trace
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider

    resource = Resource.create({"service.instance.id": f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}",
                                "process.pid": os.getpid(), "hosting.role": role})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):  # no OTEL_SERVICE_NAME
        resource = resource.merge(Resource({SERVICE_NAME: f"{DEFAULT_SERVICE}-{role.replace(' ', '-')}"}))
    provider = TracerProvider(resource=resource)  # its sampler from OTEL_TRACES_SAMPLER (default parentbased_always_on)
    processor = _processor()
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    use(trace.get_tracer("models_registry"), processor)
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


_SERVER: Any = None  # the span kinds: set by use() (no opentelemetry import until tracing is on)
_INTERNAL: Any = None


def use(sdk_tracer: Any, processor: Any) -> None:
    """Record spans with an SDK tracer's sampler, ids and resource, finished ones to a span processor
    (setup's; a test's); None, None: tracing off."""
    global tracer, _recorder, _SERVER, _INTERNAL
    from opentelemetry.trace import SpanKind

    from models_registry.observe.span_recorder import SpanRecorder

    tracer, _recorder = sdk_tracer, SpanRecorder(sdk_tracer, processor) if sdk_tracer is not None else None
    _SERVER, _INTERNAL = SpanKind.SERVER, SpanKind.INTERNAL


def _with_state(parent: Any, traceparent: str, state: str) -> Any:
    """The client's parent with the tracestate its header names, as the SDK's propagator reads it (rare)."""
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    extracted = trace.get_current_span(TraceContextTextMapPropagator().extract(
        {"traceparent": traceparent, "tracestate": state})).get_span_context()
    return parent._replace(state=extracted.trace_state)


def current_context() -> bytes:
    """The current span's context (the web's request span) for the wire message (observe.trace_context); b"": none."""
    active = _current.get()
    return pack_halves(active[0] >> 64, active[0] & LOW_64, active[1], active[2]) if active is not None else b""


_routes: dict[tuple[str, str], tuple[str, str]] = {}  # (method, path) -> (route template, span name): bounded below
MAX_ROUTES = 4096


def _route_and_name(method: str, path: str) -> tuple[str, str]:
    found = _routes.get((method, path))
    if found is None:
        model = model_path(path)
        route = path if model is None else paths.openapi_path("model-task" if model[1] else "model")
        if len(_routes) >= MAX_ROUTES:  # paths of unknown models are the client's to make up: never unbounded
            _routes.clear()
        found = _routes[(method, path)] = (route, f"{method} {route}")
    return found


def http_route(path: str) -> str:
    """The route template of an API path (low cardinality: the span's name and http.route)."""
    return _route_and_name("GET", path)[0]


async def serve_traced(scope: dict[str, Any], receive: Any, send: Any,
                       handle: Callable[[dict[str, Any], Any, Any], Awaitable[None]]) -> None:
    """handle(scope, receive, send) inside the request's SERVER span (a stream's: until its last event).

    As the SDK's start_as_current_span: the span current while handle runs, an exception recorded and the
    status set to ERROR, the span ended; a 5xx answer's status ERROR.
    """
    recorder, path, method = _recorder, scope["path"], scope["method"]
    route, name = _routes.get((method, path)) or _route_and_name(method, path)
    parent = traceparent = state = None  # the remote parent the client's traceparent (and tracestate) names
    for header, value in scope.get("headers", ()):
        if header == b"traceparent":
            traceparent = value.decode("latin-1")
        elif header == b"tracestate":
            state = value.decode("latin-1")
    if traceparent is not None:
        parent = parse_traceparent(traceparent)
        if parent is not None and state is not None:
            parent = _with_state(parent, traceparent, state)
    started = recorder.start(name, _SERVER, parent, time.time_ns(),
                             {"http.request.method": method, "http.route": route, "url.path": path})
    token, record = _current.set(started), started[3]  # start's answer is the current span as it is
    try:
        if record is None:  # sampled out: the context travels on, nothing is recorded
            await handle(scope, receive, send)
            return

        def traced_send(message: dict[str, Any]) -> Awaitable[None]:  # send's own awaitable: no frame more
            if message["type"] == "http.response.start":
                record.attributes["http.response.status_code"] = message["status"]
                if message["status"] >= 500:
                    record.fail()
            return send(message)

        await handle(scope, receive, traced_send)
    except Exception as error:  # as the SDK's use_span: recorded, the status ERROR, raised on
        if record is not None:
            record.add_exception(error, time.time_ns())
            record.fail(f"{type(error).__name__}: {error}")
        raise
    finally:
        _current.reset(token)
        if record is not None:
            record.end = time.time_ns()
            recorder.emit(record)


def annotate(model: str, version: int, token_id: int | None, error_type: str = "", **more: Any) -> str:
    """Name what the request's span served, never the token; its trace id for the log line ("": no span).

    request_record calls it once, with the log line. The route, method and status are the span's own
    (http.route, http.request.method, http.response.status_code: serve_traced); each attribute more is
    encoded and exported with every sampled request, so none repeats another.
    """
    active = _current.get()
    if active is None:
        return ""
    record = active[3]
    if record is not None:  # sampled out: a trace id to log, nothing to record
        attributes = record.attributes
        attributes["hosting.model"], attributes["hosting.model_version"] = model, version
        if token_id is not None:
            attributes["hosting.token_id"] = token_id
        if error_type:
            attributes["error.type"] = error_type
        for name, value in more.items():
            attributes[f"hosting.{name}"] = value
    return f"{active[0]:032x}"


def _ns(epoch_s: float) -> int:
    return int(epoch_s * 1_000_000_000)


def batch_traced(contexts: list[bytes]) -> bool:
    """Whether a batch whose requests carry these wire contexts has spans to record: a sampled one, or any at
    all under a sampler that decides for itself. A glance at each flags byte, for the batches (most, at one in
    ten sampled) with none; a loop, not any() of a generator: no frame resumed a request."""
    if not _recorder.drops_unsampled:
        return any(contexts)
    for context in contexts:
        if context and context[FLAGS_AT] & 1:
            return True
    return False


class BatchTrace:
    """A batch's trace context, set when its spans are recorded (after its replies went out): the reply's parent."""

    __slots__ = ("context",)

    def __init__(self) -> None:
        self.context: Any = None  # record_batch's answer


def record_batch(requests: list[tuple[bytes, float]], formed: float, started: float, ended: float,
                 attributes: dict[str, Any]) -> Any:
    """A computed batch's spans (times in epoch seconds), for its requests that came with a trace context.

    requests: (wire context (observe.trace_context), arrival at this worker) of each request the batch carried.
    Each gets an inference.queue span in its own trace (arrival to the batch's start); one inference.batch span
    (formed to ended), the first traced request's child, links every traced request's span, and holds the
    forward. A request whose trace was not sampled is left out when the sampler would record nothing under it.
    Returns the batch span's context, the parent of its reply (record_reply); None when no request was traced.
    """
    recorder = _recorder
    drops = recorder.drops_unsampled
    start, end = _ns(started), _ns(ended)
    # (context, arrival in ns) of each traced request: the comprehension's one frame, none a request
    traced = [(context, int(arrival * 1_000_000_000)) for context, arrival in requests
              if context and (context[FLAGS_AT] & 1 or not drops)]
    if not traced:
        return None
    recorder.record_queued("inference.queue", _INTERNAL, traced, start, {"hosting.model": attributes.get("hosting.model", "")})
    first = parent_of(traced[0][0])
    trace_id, span_id, flags, batch = recorder.start("inference.batch", _INTERNAL, first, _ns(formed),
                                                     attributes, [context for context, _ in traced])
    inside = first._replace(span_id=span_id, flags=flags, remote=False, state=batch.state if batch else None)
    recorder.record_finished("inference.forward", _INTERNAL, inside, start, end, {})
    if batch is not None:
        batch.end = end
        recorder.emit(batch)
    return inside


def record_reply(batch: Any, replies: int, started: float, ended: float) -> None:
    """The inference.reply span of a batch (batch: record_batch's context): its replies' one round trip."""
    _recorder.record_finished("inference.reply", _INTERNAL, batch, _ns(started), _ns(ended), {"hosting.replies": replies})
