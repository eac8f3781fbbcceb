"""With tracing on, redis-py's instrumentation nests a request's Redis calls under its SERVER span (the span is the
OpenTelemetry context's current one while the request is handled); the reply pump, which serves every request,
runs in a context of its own, and its commands start no trace (observe.sampling drops a parentless CLIENT span)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.instrumentation.redis import RedisInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased
from opentelemetry.trace import SpanKind

from models_registry.broker.layer import HostingChannelLayer
from models_registry.observe import sampling, server_span
from tests.unit.tracing_setup import traced_by

CLIENT_PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def finished(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """tracing as setup() leaves it (redis-py instrumented, the product's sampler) on a provider the test reads."""
    spans = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampling.NoBareClientSpans(ParentBased(ALWAYS_ON)))
    traced_by(monkeypatch, provider, SimpleSpanProcessor(spans))
    RedisInstrumentor().instrument(tracer_provider=provider)
    yield spans
    RedisInstrumentor().uninstrument()
    provider.shutdown()


async def test_a_requests_redis_calls_nest_under_its_span_and_the_reply_pumps_start_no_trace(
        finished: InMemorySpanExporter, layer: HostingChannelLayer) -> None:
    async def handle(scope: dict[str, Any], receive: Any, send: Any) -> None:
        channel = await layer.new_channel()
        reply = layer.expect_reply(channel)  # starts the process' reply pump, blocking in BZPOPMIN
        await layer.send(channel, {"type": "inference.result", "id": "x"})
        assert (await asyncio.wait_for(reply, 5))["id"] == "x"
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def send(message: dict[str, Any]) -> None:
        pass

    scope = {"type": "http", "method": "POST", "path": "/models/m", "headers": [(b"traceparent", CLIENT_PARENT.encode())]}
    await server_span.serve_traced(scope, None, send, handle)
    await asyncio.sleep(0.1)  # the pump's next BZPOPMIN is under way
    spans = finished.get_finished_spans()
    (server,) = [s for s in spans if s.kind == SpanKind.SERVER]
    redis_spans = [s for s in spans if s.kind == SpanKind.CLIENT]
    assert redis_spans, [s.name for s in spans]
    assert all(s.parent is not None and s.parent.span_id == server.context.span_id for s in redis_spans)
    assert all(s.context.trace_id == server.context.trace_id for s in redis_spans)
    assert "BZPOPMIN" not in {s.name for s in redis_spans}  # the pump's: in no request's trace, and no trace of its own
