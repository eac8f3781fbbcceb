"""observe.span_export and span_encoding: spans encoded as they end make, once framed, the very request the SDK's
encoder makes of the span objects (decoded and compared message for message); the batch processor's queue gets
bytes, never spans."""

from __future__ import annotations

import time
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from models_registry.observe import span_encoding
from models_registry.observe.span_encoding import encode_span
from models_registry.observe.span_export import EncodedSpan, EncodedSpanExporter, EncodingSpanProcessor, request_body

CLIENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _framed(spans: list[ReadableSpan]) -> ExportTraceServiceRequest:
    encoded = [EncodedSpan(encode_span(span), span.resource, span.instrumentation_scope) for span in spans]
    return ExportTraceServiceRequest.FromString(request_body(encoded))


def _spans() -> list[ReadableSpan]:
    """Spans of two processes (resources) and two scopes, with what each part of the encoder writes."""
    finished = InMemorySpanExporter()
    web = TracerProvider(resource=Resource.create({"service.name": "web", "process.pid": 7}))
    web.add_span_processor(SimpleSpanProcessor(finished))
    worker = TracerProvider(resource=Resource({"service.name": "worker"}, schema_url="https://example.com/s"))
    worker.add_span_processor(SimpleSpanProcessor(finished))
    parent = TraceContextTextMapPropagator().extract({"traceparent": CLIENT, "tracestate": "vendor=a,other=b"})
    ours = web.get_tracer("models_registry")
    with ours.start_as_current_span("POST /models/{name}", context=parent, kind=trace.SpanKind.SERVER, attributes={
            "http.route": "/models/{name}", "hosting.model_version": 3, "flag": True, "ratio": 0.5,
            "names": ["a", "b"], "sizes": (1, 2)}) as server:
        server.add_event("retry", {"attempt": 2})
        server.set_status(trace.StatusCode.ERROR, "upstream gone")
        other = web.get_tracer("redis", "8.0", schema_url="https://example.com/r", attributes={"db": 0})
        other.start_span("GET", kind=trace.SpanKind.CLIENT).end()
    batch = worker.get_tracer("models_registry").start_span(
        "inference.batch", start_time=1_000, links=[trace.Link(server.get_span_context(), {"hosting.index": 0})],
        attributes={"hosting.batch.size": 1})
    batch.end(end_time=2_000)
    return list(finished.get_finished_spans())


def test_framed_spans_decode_to_the_sdk_encoders_request() -> None:
    spans = _spans()
    assert _framed(spans) == encode_spans(spans)
    assert len(encode_spans(spans).resource_spans) == 2  # the comparison covered two resources


def test_an_attribute_that_cannot_be_encoded_is_left_out_as_the_sdk_does(caplog: pytest.LogCaptureFixture) -> None:
    span = ReadableSpan("odd", context=trace.SpanContext(1, 2, False, trace.TraceFlags(1)), resource=Resource({}),
                        attributes={"kept": 1, "object": object(), "after": "x"}, start_time=1, end_time=2)
    assert _framed([span]) == encode_spans([span])
    assert [a.key for a in _framed([span]).resource_spans[0].scope_spans[0].spans[0].attributes] == ["kept", "after"]


class _Kept(SpanExporter):
    """What the batch processor hands its exporter."""

    def __init__(self) -> None:
        self.batches: list[list[Any]] = []

    def export(self, spans: Any) -> SpanExportResult:
        self.batches.append(list(spans))
        return SpanExportResult.SUCCESS


def test_the_batch_queue_holds_each_sampled_spans_bytes() -> None:
    kept = _Kept()
    provider = TracerProvider()
    provider.add_span_processor(EncodingSpanProcessor(BatchSpanProcessor(kept, schedule_delay_millis=60_000)))
    tracer = provider.get_tracer("models_registry")
    tracer.start_span("sampled", attributes={"hosting.model": "m"}).end()
    unsampled = trace.set_span_in_context(trace.NonRecordingSpan(trace.SpanContext(1, 2, True, trace.TraceFlags(0))))
    with trace.use_span(tracer.start_span("parent not sampled", context=unsampled), end_on_exit=True):
        pass
    provider.force_flush()
    queued = [span for batch in kept.batches for span in batch]
    assert [type(span) for span in queued] == [EncodedSpan]
    request = ExportTraceServiceRequest.FromString(request_body(queued))
    span = request.resource_spans[0].scope_spans[0].spans[0]
    assert span.name == "sampled" and span.attributes[0].key == "hosting.model"
    provider.shutdown()


def test_the_installed_exporter_has_what_the_encoded_export_uses() -> None:
    assert EncodedSpanExporter.fits()  # else setup falls back to the SDK's encoding: an upgrade must show here


def test_every_value_kind_and_the_counts_of_what_was_dropped_decode_as_the_sdk_encodes_them() -> None:
    """observe.span_wire writes each field by hand: the values at their edges, unicode, events, limits."""
    finished = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=12, max_events=1, max_links=1,
                                                     max_event_attributes=1, max_link_attributes=1))
    provider.add_span_processor(SimpleSpanProcessor(finished))
    context = trace.SpanContext(2**128 - 1, 2**64 - 1, True, trace.TraceFlags(3))
    span = provider.get_tracer("t").start_span("ünïcode ✓", context=trace.set_span_in_context(
        trace.NonRecordingSpan(context)), kind=trace.SpanKind.CONSUMER, links=[
            trace.Link(context, {"a": 1, "b": 2}), trace.Link(trace.SpanContext(5, 6, False))],
        attributes={"neg": -1, "min": -2**63, "max": 2**63 - 1, "zero": 0, "empty": "", "false": False,
                    "bytes": b"\x00\xff", "nan": float("-inf"), "mixed": ["x", ""], "nones": [None, 1],
                    "unicode": "日本", "flt": 0.0, "over": 1})
    span.add_event("first", {"x": 1, "y": 2}, timestamp=3)
    span.add_event("second")
    span.set_status(trace.StatusCode.OK)
    span.end(end_time=2**63)
    odd = ReadableSpan("odd", context=trace.SpanContext(1, 2, False, trace.TraceFlags(1)), resource=Resource({}),
                       attributes={"big": 2**64, "nested": {"k": "v", "n": [1, 2]}, "none": None}, start_time=1,
                       end_time=2, status=trace.Status(trace.StatusCode.UNSET))
    spans = [*finished.get_finished_spans(), odd]
    assert _framed(spans) == encode_spans(spans)
    encoded = _framed(spans).resource_spans[0].scope_spans[0].spans[0]
    assert (encoded.dropped_attributes_count, encoded.dropped_events_count, encoded.dropped_links_count) == (1, 1, 1)


def test_each_attribute_pair_is_encoded_once_and_a_refused_one_is_logged_each_time(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(span_encoding, "_pairs", {})
    monkeypatch.setattr(span_encoding, "_tails", {})
    monkeypatch.setattr(span_encoding, "MAX_PAIRS", 3)
    resource = Resource({})  # one process: its spans share their resource object
    spans = [ReadableSpan("s", context=trace.SpanContext(1, 2, False, trace.TraceFlags(1)), resource=resource,
                          attributes={"route": "/a", "v": (1, True, 1.0, 1)[n], "big": 2**64}, start_time=1,
                          end_time=2) for n in range(4)]
    assert _framed(spans) == encode_spans(spans)
    assert len(span_encoding._pairs) <= 3 and not span_encoding._tails  # a span with a refused pair: never cached
    assert sum("span attribute big not exported" in r.message for r in caplog.records) == 4
    kinds = [_framed([span]).resource_spans[0].scope_spans[0].spans[0].attributes[1].value.WhichOneof("value")
             for span in spans]
    assert kinds == ["int_value", "bool_value", "double_value", "int_value"]  # 1, True and 1.0: equal, not one pair


def test_the_fields_spans_share_are_cached_within_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(span_encoding, "_tails", {})
    monkeypatch.setattr(span_encoding, "MAX_PAIRS", 3)
    resource = Resource({})
    spans = [ReadableSpan("s", context=trace.SpanContext(1, 2 + n, False, trace.TraceFlags(1)), resource=resource,
                          attributes={"route": "/a", "n": n % 5}, start_time=n, end_time=n + 1) for n in range(10)]
    assert _framed(spans) == encode_spans(spans)  # the second five from the cache, where it still held them
    assert 0 < len(span_encoding._tails) <= 3


class _Sent:
    """What the exporter's HTTP client answers: sent."""

    success, error, status_code = True, None, 200


class _Bodies:
    """The exporter's HTTP client, keeping each request body instead of sending it (the integration tier sends)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def export(self, body: bytes, *args: Any, **kwargs: Any) -> _Sent:
        self.bodies.append(body)
        return _Sent()

    def shutdown(self) -> None:
        pass


def test_bare_bytes_are_queued_and_sent_under_the_recorders_resource_and_scope() -> None:
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    exporter = EncodedSpanExporter(endpoint="http://127.0.0.1:9/v1/traces")
    exporter._client = _Bodies()  # type: ignore[assignment]
    batch = BatchSpanProcessor(exporter, schedule_delay_millis=60_000)
    resource, scope = Resource({"service.name": "worker"}), InstrumentationScope("models_registry")
    queue = EncodingSpanProcessor(batch).bytes_queue(resource, scope)
    span = ReadableSpan("inference.queue", context=trace.SpanContext(1, 2, False, trace.TraceFlags(1)),
                        resource=resource, attributes={"hosting.model": "m"}, start_time=1, end_time=2,
                        instrumentation_scope=scope)
    queue.put_all([encode_span(span)])
    assert list(batch._batch_processor._queue) == [encode_span(span)]  # bytes: nothing the collector tracks
    batch.force_flush()
    (body,) = exporter._client.bodies  # type: ignore[attr-defined]
    assert ExportTraceServiceRequest.FromString(body) == encode_spans([span])
    batch.shutdown()


def test_an_exporter_that_takes_no_bare_bytes_gets_encoded_spans() -> None:
    kept = _Kept()
    batch = BatchSpanProcessor(kept, schedule_delay_millis=60_000)
    EncodingSpanProcessor(batch).bytes_queue(Resource({}), None).put_all([b"\x0a\x00"])
    batch.force_flush()
    assert [type(span) for span in kept.batches[0]] == [EncodedSpan]
    batch.shutdown()


def test_spans_go_straight_to_the_sdks_queue_below_a_batch_and_through_its_emit_from_a_batch_on() -> None:
    exporter = EncodedSpanExporter(endpoint="http://127.0.0.1:9/v1/traces")
    exporter._client = _Bodies()  # type: ignore[assignment]
    batch = BatchSpanProcessor(exporter, max_export_batch_size=4, schedule_delay_millis=60_000)
    processor = EncodingSpanProcessor(batch)
    queue, sdk = processor.bytes_queue(Resource({}), None), batch._batch_processor
    for n in range(3):
        queue.put_all([bytes((0x0A, 1, n))])
    assert len(sdk._queue) == 3 and not sdk._worker_awaken.is_set()  # appended, no export due (nor emit called)
    queue.put_all([b"\x0a\x01\x03"])  # the batch's fourth: emit() appends it and wakes the export
    for _ in range(200):
        if exporter._client.bodies:  # type: ignore[attr-defined]
            break
        time.sleep(0.01)
    (body,) = exporter._client.bodies  # type: ignore[attr-defined]
    assert len(ExportTraceServiceRequest.FromString(body).resource_spans[0].scope_spans[0].spans) == 4
    processor.shutdown()
    queue.put_all([b"\x0a\x01\x04"])  # after shutdown: the SDK's emit refuses it, as it refuses any span then
    assert len(sdk._queue) == 0 and queue.room == 0
