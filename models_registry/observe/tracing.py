"""OpenTelemetry traces on the SDK as it ships, exported over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set.

setup() builds one TracerProvider per process: the SDK's BatchSpanProcessor (OTEL_BSP_*) and OTLP/HTTP
OTLPSpanExporter (OTEL_EXPORTER_OTLP_*), the resource from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, the
sampler of observe.sampling, and in a web process redis-py instrumented so a request's Redis calls nest under its
span. Until then `tracer` is None and the hot paths test only that attribute: with tracing off no SDK module is
imported.

The web's SERVER span is the OpenTelemetry context's current span while the request is handled
(observe.server_span, called by api.server.front_door); its W3C traceparent (and tracestate) travel in the wire message (wire_context), and the
worker's spans join that trace (worker.batch_spans).
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from typing import Any

from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from models_registry.core.conf import conf

logger = logging.getLogger(__name__)

tracer: Any = None  # this process' SDK tracer once setup() ran with tracing on
provider: Any = None  # its TracerProvider (flushed at a worker's shutdown)
DEFAULT_SERVICE = "model-hosting"
SCOPE = "models_registry"  # the instrumentation scope of our own spans
# W3C trace context only, whatever OTEL_PROPAGATORS says: the wire message has a field for it and nothing else.
propagator = TraceContextTextMapPropagator()


def setup(role: str) -> None:
    """Start exporting this process' spans (role: web, worker) when HOSTING_TRACING is on."""
    global tracer, provider
    if tracer is not None or not conf.TRACING:
        return
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.redis import RedisInstrumentor
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from models_registry.observe import sampling

    resource = Resource.create({"service.instance.id": f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}",
                                "process.pid": os.getpid(), "hosting.role": role})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):  # no OTEL_SERVICE_NAME
        resource = resource.merge(Resource({SERVICE_NAME: f"{DEFAULT_SERVICE}-{role.replace(' ', '-')}"}))
    sampler = sampling.from_environment()
    made = TracerProvider(sampler=sampler, resource=resource)
    made.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(made)
    if role == "web":  # a worker's spans are recorded after the fact, never current: no Redis call could nest there
        RedisInstrumentor().instrument(tracer_provider=made)
    use(made)
    logger.info("tracing on: %s spans of %s exported over OTLP/HTTP, sampler %s", role,
                resource.attributes.get(SERVICE_NAME), sampler.get_description())


def use(chosen: Any) -> None:
    """Record our spans with this TracerProvider's tracer (setup's; a test's); None: tracing off."""
    global tracer, provider
    provider, tracer = chosen, chosen.get_tracer(SCOPE) if chosen is not None else None


def flush() -> None:
    """Export the spans still queued now (a worker about to exit)."""
    if provider is not None:
        provider.force_flush()


def wire_context() -> tuple[str, str]:
    """The current span's (traceparent, tracestate) for the wire message; ("", "") when there is none."""
    carrier: dict[str, str] = {}
    propagator.inject(carrier)
    return carrier.get("traceparent", ""), carrier.get("tracestate", "")


def annotate(model: str, version: int, token_id: int | None, error_type: str = "", **more: Any) -> str:
    """Name on the request's span what it served, never the token; its trace id for the log line ("": no span).

    request_record calls it once, with the log line; the route, method and status are the span's own
    (observe.server_span). A request whose trace is not sampled still has a trace id to log.
    """
    span = trace.get_current_span()
    context = span.get_span_context()
    if not context.is_valid:
        return ""
    if span.is_recording():
        attributes: dict[str, Any] = {"hosting.model": model, "hosting.model_version": version}
        if token_id is not None:
            attributes["hosting.token_id"] = token_id
        if error_type:
            attributes["error.type"] = error_type
        for name, value in more.items():
            attributes[f"hosting.{name}"] = value
        span.set_attributes(attributes)
    return trace.format_trace_id(context.trace_id)
