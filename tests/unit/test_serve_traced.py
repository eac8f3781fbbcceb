"""observe.server_span on the SDK's own tracer: the SERVER span continues a client's traceparent, is the OpenTelemetry
context's current span, records the status and what annotate() names, and its W3C context goes into the wire
message; a client's unsampled trace records nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased

from models_registry.observe import server_span, tracing
from tests.unit.tracing_setup import traced_by

TRACE_ID, CLIENT_SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"


@pytest.fixture
def finished(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """tracing's globals as setup() leaves them, on a provider whose finished spans the test reads."""
    spans = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBased(ALWAYS_ON))
    traced_by(monkeypatch, provider, SimpleSpanProcessor(spans))
    yield spans
    provider.shutdown()


async def _serve(headers: list[tuple[bytes, bytes]], status: int = 200) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """One request through serve_traced: what the server sent, and what the app saw (wire traceparent, trace id)."""
    sent: list[dict[str, Any]] = []
    seen: dict[str, str] = {}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen["wire"], seen["state"] = tracing.wire_context()
        seen["trace_id"] = tracing.annotate("bert", 2, 7, "" if status < 400 else "overloaded", inputs=1)
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    await server_span.serve_traced({"type": "http", "method": "POST", "path": "/models/bert", "headers": headers},
                               None, send, app)
    return sent, seen


async def test_a_clients_traceparent_is_continued_and_the_span_names_what_it_served(
        finished: InMemorySpanExporter) -> None:
    sent, seen = await _serve([(b"traceparent", f"00-{TRACE_ID}-{CLIENT_SPAN}-01".encode())], status=503)
    (span,) = finished.get_finished_spans()
    assert span.parent is not None and f"{span.parent.span_id:016x}" == CLIENT_SPAN
    assert span.name == "POST /models/{name}" and span.kind == trace.SpanKind.SERVER
    assert dict(span.attributes) == {
        "http.request.method": "POST", "http.route": "/models/{name}", "url.path": "/models/bert",
        "http.response.status_code": 503, "hosting.model": "bert", "hosting.model_version": 2,
        "hosting.token_id": 7, "error.type": "overloaded", "hosting.inputs": 1}
    assert span.status.status_code == trace.StatusCode.ERROR
    assert seen == {"wire": f"00-{TRACE_ID}-{span.context.span_id:016x}-01", "state": "", "trace_id": TRACE_ID}
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]


async def test_a_clients_tracestate_travels_on_with_its_traceparent(finished: InMemorySpanExporter) -> None:
    _, seen = await _serve([(b"traceparent", f"00-{TRACE_ID}-{CLIENT_SPAN}-01".encode()), (b"tracestate", b"vendor=x")])
    (span,) = finished.get_finished_spans()
    assert span.context.trace_state.get("vendor") == "x" and seen["state"] == "vendor=x"


async def test_a_tracestate_without_traceparent_starts_a_trace(finished: InMemorySpanExporter) -> None:
    await _serve([(b"tracestate", b"vendor=x")])
    (span,) = finished.get_finished_spans()
    assert span.parent is None


async def test_a_clients_unsampled_trace_records_nothing_and_keeps_its_id(finished: InMemorySpanExporter) -> None:
    sent, seen = await _serve([(b"traceparent", f"00-{TRACE_ID}-{CLIENT_SPAN}-00".encode())])
    assert finished.get_finished_spans() == ()
    assert seen["trace_id"] == TRACE_ID and seen["wire"].endswith("-00")  # the worker's spans follow the decision
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]


async def test_an_error_in_the_app_is_recorded_on_the_span_and_raised_and_the_context_restored(
        finished: InMemorySpanExporter) -> None:
    before = trace.get_current_span()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        raise RuntimeError("the app broke")

    with pytest.raises(RuntimeError, match="the app broke"):
        await server_span.serve_traced({"type": "http", "method": "POST", "path": "/models/bert", "headers": []},
                                   None, None, app)
    (span,) = finished.get_finished_spans()
    assert span.status.status_code == trace.StatusCode.ERROR
    assert span.status.description == "RuntimeError: the app broke"
    assert [event.name for event in span.events] == ["exception"]
    assert trace.get_current_span() is before  # the request's span is no longer current


def test_a_paths_route_is_kept_and_the_kept_ones_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_span, "MAX_ROUTES", 3)
    monkeypatch.setattr(server_span, "_routes", {})
    routes = [server_span.http_route(f"/models/m{n}/fill-mask") for n in range(5)]
    assert routes == ["/models/{name}/{task}"] * 5
    assert len(server_span._routes) <= 3
