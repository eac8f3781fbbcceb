"""The web's SERVER span of an API request, current in the OpenTelemetry context while the request is handled.

Started from the ASGI scope as opentelemetry-instrumentation-asgi starts its own (the client's W3C traceparent
and tracestate through the propagator), but with one span a request: that middleware adds a span for every
`send` and `receive` and reads more of the scope, web CPU this server spends on requests instead. The span is
named by the route's template (low cardinality), and a stream's lasts until its last event.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from opentelemetry import context, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from models_registry.core import paths
from models_registry.core.paths import model_path
from models_registry.observe import tracing

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


def _parent(headers: Any) -> Any:
    """The context of the client's span (its traceparent and tracestate headers); None: the request starts a trace."""
    carrier: dict[str, str] = {}
    for header, value in headers:
        if header == b"traceparent" or header == b"tracestate":
            carrier[header.decode("latin-1")] = value.decode("latin-1")
    return tracing.propagator.extract(carrier) if "traceparent" in carrier else None


async def serve_traced(scope: dict[str, Any], receive: Any, send: Any,
                       handle: Callable[[dict[str, Any], Any, Any], Awaitable[None]]) -> None:
    """handle(scope, receive, send) inside the request's SERVER span, current in the OpenTelemetry context.

    As the SDK's start_as_current_span: an exception recorded, the status ERROR, raised on; a 5xx answer's status
    ERROR; the span ended and the context restored.
    """
    path, method = scope["path"], scope["method"]
    route, name = _routes.get((method, path)) or _route_and_name(method, path)
    span = tracing.tracer.start_span(name, context=_parent(scope.get("headers", ())), kind=SpanKind.SERVER, attributes={
        "http.request.method": method, "http.route": route, "url.path": path})
    token = context.attach(trace.set_span_in_context(span))
    try:
        if not span.is_recording():  # sampled out: the context travels on, nothing is recorded
            await handle(scope, receive, send)
            return

        def traced_send(message: dict[str, Any]) -> Awaitable[None]:  # send's own awaitable: no frame more
            if message["type"] == "http.response.start":
                span.set_attribute("http.response.status_code", message["status"])
                if message["status"] >= 500:
                    span.set_status(StatusCode.ERROR)
            return send(message)

        await handle(scope, receive, traced_send)
    except Exception as error:
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        raise
    finally:
        context.detach(token)
        span.end()
