"""observe.span_record, span_recorder and sampling: a SpanRecord is exported as the very OTLP message the SDK's
encoder makes of the same span, is started with the decision, ids and flags the SDK's tracer would give it,
and a traceparent is read as the SDK's propagator reads it."""

from __future__ import annotations

import random
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import (ALWAYS_OFF, ALWAYS_ON, Decision, ParentBased, Sampler,
                                              SamplingResult, TraceIdRatioBased)
from opentelemetry.trace import SpanKind, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from models_registry.observe.sampling import context_of, decider, static_decisions
from models_registry.observe.span_encoding import encode_record
from models_registry.observe.span_export import EncodedSpanExporter, EncodingSpanProcessor, request_body
from models_registry.observe.span_record import RANDOM_TRACE_ID, SAMPLED, SpanRecord
from models_registry.observe.trace_context import Parent, pack_context, parent_of, parse_traceparent
from models_registry.observe.span_recorder import SpanRecorder

RESOURCE = Resource.create({"service.name": "web", "process.pid": 7})
CLIENT = Parent(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, 1, True, TraceState([("vendor", "a")]))


def _as_the_sdk_encodes(records: list[SpanRecord], recorder: SpanRecorder) -> tuple[Any, Any]:
    """(our framed bytes of the records as the batch queue holds them, decoded; the SDK encoder's request of
    their ReadableSpans)."""
    ours = ExportTraceServiceRequest.FromString(request_body([encode_record(record) for record in records],
                                                             (recorder.resource, recorder.scope)))
    return ours, encode_spans([record.readable(recorder.resource, recorder.scope) for record in records])


def _recorder(sampler: Sampler = ALWAYS_ON, limits: SpanLimits | None = None) -> tuple[SpanRecorder, Any]:
    spans = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler, resource=RESOURCE, span_limits=limits)
    processor = SimpleSpanProcessor(spans)
    provider.add_span_processor(processor)
    return SpanRecorder(provider.get_tracer("models_registry"), processor, limits), spans


def test_records_encode_as_the_sdk_encodes_their_readable_spans() -> None:
    recorder, _ = _recorder(limits=SpanLimits(max_links=2))
    _, _, _, web = recorder.start("POST /models/{name}", SpanKind.SERVER, CLIENT, 1_000, {
        "http.request.method": "POST", "http.route": "/models/{name}", "url.path": "/models/bert"})
    web.attributes.update({"http.response.status_code": 500, "hosting.model_version": 3, "hosting.ratio": 0.5})
    try:
        raise RuntimeError("boom ✓")
    except RuntimeError as error:
        web.add_exception(error, 1_500)
        web.fail(f"RuntimeError: {error}")
    web.end = 2_000
    links = [pack_context(n + 1, n + 2, 1) for n in range(3)]  # wire contexts, as the worker links its requests
    _, _, _, batch = recorder.start("inference.batch", SpanKind.INTERNAL, parent_of(links[0]), 3_000,
                                    {"hosting.batch.size": 3}, links)
    batch.end = 4_000
    _, _, _, root = recorder.start("GET /v1/models", SpanKind.SERVER, None, 5_000, {})
    root.end = 6_000
    ours, sdks = _as_the_sdk_encodes([web, batch, root], recorder)
    assert ours == sdks
    spans = ours.resource_spans[0].scope_spans[0].spans
    assert spans[0].trace_state == "vendor=a" and spans[0].events[0].name == "exception"
    assert len(spans[1].links) == 2 and spans[1].dropped_links_count == 1  # the newest kept, as the SDK's
    assert ours.resource_spans[0].scope_spans[0].scope.name == "models_registry"


@pytest.mark.parametrize("parent", [CLIENT._replace(state=None), CLIENT], ids=["bytes at once", "with a tracestate"])
def test_a_finished_child_span_is_queued_as_the_bytes_of_its_record(parent: Parent) -> None:
    exported = InMemorySpanExporter()  # takes what the batch queue held: EncodedSpans here
    batch = BatchSpanProcessor(exported)
    recorder = SpanRecorder(TracerProvider(resource=RESOURCE).get_tracer("models_registry"), EncodingSpanProcessor(batch))
    attributes = {"hosting.model": "m", "hosting.replies": 3}
    span_id = recorder.record_finished("inference.queue", SpanKind.INTERNAL, parent, 1_000, 2_000, attributes)
    batch.force_flush()
    (queued,) = exported.get_finished_spans()
    record = SpanRecord("inference.queue", SpanKind.INTERNAL, parent.trace_id, span_id,
                        SAMPLED | parent.flags & RANDOM_TRACE_ID,
                        parent, 1_000, attributes, parent.state)
    record.end = 2_000
    assert span_id is not None and queued.data == encode_record(record)  # type: ignore[attr-defined]
    unsampled = parent._replace(flags=0)  # the default sampler, parent-based: nothing under an unsampled parent
    assert recorder.record_finished("inference.queue", SpanKind.INTERNAL, unsampled, 1, 2, attributes) is None
    batch.shutdown()


def test_a_batchs_child_spans_are_queued_at_once_as_the_bytes_of_their_records() -> None:
    attributes = {"hosting.model": "m"}
    parents = [CLIENT._replace(state=None), CLIENT._replace(span_id=5, flags=3, state=None), CLIENT,
               CLIENT._replace(flags=0, state=None), Parent(7, 8, 1, False)]  # remote, one with a tracestate,
    spans = [(parent, 1_000 + n, 2_000 + n) for n, parent in enumerate(parents)]  # an unsampled one, a local one
    exported = InMemorySpanExporter()
    batch = BatchSpanProcessor(exported)
    recorder = SpanRecorder(TracerProvider(resource=RESOURCE).get_tracer("models_registry"), EncodingSpanProcessor(batch))
    random.seed(36)  # the span ids drawn: the same in the second recorder below
    ids = recorder.record_all("inference.queue", SpanKind.INTERNAL, spans, attributes)
    batch.force_flush()
    queued = {span.data for span in exported.get_finished_spans()}  # type: ignore[attr-defined]
    assert ids[3] is None and None not in ids[:3] + ids[4:] and len(set(ids)) == 5
    records = set()
    for span_id, (parent, start, end) in zip(ids, spans):
        if span_id is not None:
            record = SpanRecord("inference.queue", SpanKind.INTERNAL, parent.trace_id, span_id,
                                SAMPLED | parent.flags & RANDOM_TRACE_ID, parent, start, attributes, parent.state)
            record.end = end
            records.add(encode_record(record))
    assert queued == records and len(queued) == 4
    batch.shutdown()
    # With the exporter that takes bare bytes: the same bytes, straight into the SDK batch processor's own queue.
    batch = BatchSpanProcessor(EncodedSpanExporter(endpoint="http://127.0.0.1:9/v1/traces"), schedule_delay_millis=60_000)
    recorder = SpanRecorder(TracerProvider(resource=RESOURCE).get_tracer("models_registry"), EncodingSpanProcessor(batch))
    random.seed(36)
    assert recorder.record_all("inference.queue", SpanKind.INTERNAL, spans, attributes) == ids
    sdk_queue = batch._batch_processor._queue  # type: ignore[attr-defined]
    assert all(type(data) is bytes for data in sdk_queue) and set(sdk_queue) == records and len(sdk_queue) == 4
    sdk_queue.clear()  # nothing to send to port 9
    batch.shutdown()


def _queued_record(context: bytes, start: int, end: int, span_id: int, attributes: dict[str, Any]) -> bytes:
    """encode_record of the queue span record_queued should make under a wire context, from its start."""
    parent = parent_of(context)
    record = SpanRecord("inference.queue", SpanKind.INTERNAL, parent.trace_id, span_id,
                        SAMPLED | parent.flags & RANDOM_TRACE_ID, parent, min(start, end), attributes)
    record.end = end
    return encode_record(record)


def test_a_batchs_queue_spans_under_wire_contexts_are_the_bytes_of_their_records() -> None:
    attributes = {"hosting.model": "m"}
    contexts = [pack_context(CLIENT.trace_id, 5 + n, flags) for n, flags in enumerate((1, 3, 0, 1))]  # one unsampled
    spans = [(context, 1_000 + n) for n, context in enumerate(contexts)]
    spans[3] = (contexts[3], 9_000)  # arrived after the batch's start (another host's clock): the start, then
    batch = BatchSpanProcessor(EncodedSpanExporter(endpoint="http://127.0.0.1:9/v1/traces"), schedule_delay_millis=60_000)
    recorder = SpanRecorder(TracerProvider(resource=RESOURCE).get_tracer("models_registry"), EncodingSpanProcessor(batch))
    random.seed(36)
    recorder.record_queued("inference.queue", SpanKind.INTERNAL, spans, 5_000, attributes)
    random.seed(36)  # the ids record_queued drew: one draw for the three sampled, in their order
    drawn = random.randbytes(24)
    ids = [int.from_bytes(drawn[at:at + 8], "big") for at in (0, 8, 16)]
    sdk_queue = batch._batch_processor._queue  # type: ignore[attr-defined]
    assert list(sdk_queue)[::-1] == [  # appended in order (the SDK's queue takes them at its left)
        _queued_record(*spans[n], 5_000, span_id, attributes) for n, span_id in zip((0, 1, 3), ids)]
    sdk_queue.clear()  # nothing to send to port 9
    batch.shutdown()


def test_a_zero_among_the_drawn_span_ids_has_every_queue_span_drawn_again(monkeypatch: pytest.MonkeyPatch) -> None:
    attributes = {"hosting.model": "m"}
    spans = [(pack_context(CLIENT.trace_id, 5 + n, 1), 1_000) for n in range(2)]
    batch = BatchSpanProcessor(EncodedSpanExporter(endpoint="http://127.0.0.1:9/v1/traces"), schedule_delay_millis=60_000)
    recorder = SpanRecorder(TracerProvider(resource=RESOURCE).get_tracer("models_registry"), EncodingSpanProcessor(batch))
    monkeypatch.setattr(random, "randbytes", lambda size: bytes(size))  # the draw W3C forbids, made certain
    random.seed(7)
    recorder.record_queued("inference.queue", SpanKind.INTERNAL, spans, 5_000, attributes)
    random.seed(7)  # drawn one by one as the SDK's RandomIdGenerator draws them
    ids = [random.getrandbits(64), random.getrandbits(64)]
    sdk_queue = batch._batch_processor._queue  # type: ignore[attr-defined]
    assert 0 not in ids and list(sdk_queue)[::-1] == [
        _queued_record(*span, 5_000, span_id, attributes) for span, span_id in zip(spans, ids)]
    sdk_queue.clear()  # nothing to send to port 9
    batch.shutdown()


def test_queue_spans_under_a_sampler_that_asks_are_recorded_as_it_decides() -> None:
    recorder, spans = _recorder(_Vendor())  # decides by name, adds an attribute and a tracestate: no bytes at once
    contexts = [pack_context(CLIENT.trace_id, 5, 1), pack_context(CLIENT.trace_id, 6, 0)]
    recorder.record_queued("inference.queue", SpanKind.INTERNAL, [(contexts[0], 1_000), (contexts[1], 7_000)], 5_000,
                           {"hosting.model": "m"})
    finished = spans.get_finished_spans()
    assert [(s.parent.span_id, s.start_time, s.end_time) for s in finished] == [(5, 1_000, 5_000), (6, 5_000, 5_000)]
    assert all(s.attributes["sampled.by"] == "vendor" and s.context.trace_state.get("v") == "0" for s in finished)
    recorder.record_queued("skip.queue", SpanKind.INTERNAL, [(contexts[0], 1_000)], 5_000, {})
    assert len(spans.get_finished_spans()) == 2


def test_span_limits_bound_a_records_attributes_as_the_sdks() -> None:
    recorder, spans = _recorder(limits=SpanLimits(max_span_attributes=2, max_span_attribute_length=4))
    record = recorder.start("s", SpanKind.SERVER, None, 1, {"a": 1, "b": "long value", "c": 3})[3]
    record.end = 2
    recorder.emit(record)  # to the SDK's processor as a ReadableSpan: the limits applied first
    (exported,) = spans.get_finished_spans()
    assert dict(exported.attributes) == {"b": "long", "c": 3} and exported.dropped_attributes == 1  # the oldest out
    ours, sdks = _as_the_sdk_encodes([record], recorder)
    assert ours == sdks and ours.resource_spans[0].scope_spans[0].spans[0].dropped_attributes_count == 1


class _Vendor(Sampler):
    """A sampler the SDK does not ship: it decides by the span's name and adds an attribute and a tracestate."""

    def should_sample(self, parent_context: Any, trace_id: int, name: str, kind: Any = None, attributes: Any = None,
                      links: Any = None, trace_state: Any = None) -> SamplingResult:
        if name.startswith("skip"):
            return SamplingResult(Decision.DROP)
        return SamplingResult(Decision.RECORD_AND_SAMPLE, {**(attributes or {}), "sampled.by": "vendor"},
                              TraceState([("v", str(len(links or ())))]))

    def get_description(self) -> str:
        return "vendor"


SAMPLERS = [ALWAYS_ON, ALWAYS_OFF, TraceIdRatioBased(0.5), ParentBased(ALWAYS_ON), ParentBased(ALWAYS_OFF),
            ParentBased(TraceIdRatioBased(0.25)), ParentBased(ALWAYS_ON, remote_parent_not_sampled=ALWAYS_ON,
                                                              local_parent_sampled=ALWAYS_OFF), _Vendor()]


@pytest.mark.parametrize("sampler", SAMPLERS, ids=lambda s: s.get_description())
def test_the_decision_is_the_samplers_own(sampler: Sampler) -> None:
    decide, draw = decider(sampler), random.Random(7)
    for _ in range(400):
        trace_id = draw.getrandbits(128) or 1
        parent = draw.choice([None, Parent(trace_id, draw.getrandbits(64) or 1, draw.choice([0, 1, 2, 3]),
                                           draw.random() < 0.5, draw.choice([None, TraceState([("k", "v")])]))])
        name = draw.choice(["inference.queue", "skip me"])
        links = [pack_context(5, 6, 1)] * draw.randint(0, 2)
        expected = sampler.should_sample(context_of(parent), trace_id, name, SpanKind.INTERNAL, {"a": 1},
                                         [trace.Link(trace.SpanContext(5, 6, True, trace.TraceFlags(1)))] * len(links))
        got = decide(parent, trace_id, name, SpanKind.INTERNAL, {"a": 1}, links)
        assert got.sampled == expected.decision.is_sampled()
        if got.sampled:
            assert dict(got.attributes or {"a": 1}) == dict(expected.attributes)
            assert (got.state or TraceState()) == (expected.trace_state or TraceState())


@pytest.mark.parametrize(("sampler", "statics"), zip(SAMPLERS, [5, 5, 0, 5, 5, 4, 5, 0]),
                         ids=[s.get_description() for s in SAMPLERS])
def test_a_static_decision_is_the_one_decide_makes(sampler: Sampler, statics: int) -> None:
    """The root and the four kinds of parent: a ratio (at the root) and _Vendor decide per span."""
    static, decide, draw = static_decisions(sampler), decider(sampler), random.Random(3)
    for _ in range(200):
        trace_id = draw.getrandbits(128) or 1
        for key, decision in static.items():
            parent = None if key is None else Parent(trace_id, 5, int(key[1]) | draw.choice([0, 2]), key[0])
            assert decide(parent, trace_id, "s", SpanKind.SERVER, {}, ()) == decision  # no attributes, no state
    assert len(static) == statics


@pytest.mark.parametrize("sampler", [ParentBased(ALWAYS_ON, remote_parent_not_sampled=ALWAYS_ON), ALWAYS_OFF,
                                     ParentBased(TraceIdRatioBased(0.5)), _Vendor()], ids=lambda s: s.get_description())
@pytest.mark.parametrize("parent", [None, CLIENT, CLIENT._replace(flags=0), CLIENT._replace(flags=3, state=None),
                                    Parent(9, 8, 1, False)])
def test_a_recorded_span_gets_the_ids_flags_and_state_the_sdks_tracer_gives(sampler: Sampler,
                                                                            parent: Parent | None) -> None:
    recorder, spans = _recorder(sampler)
    sdk_tracer = TracerProvider(sampler=sampler).get_tracer("t")
    random.seed(11)
    made = sdk_tracer.start_span("s", context=context_of(parent), kind=SpanKind.SERVER)
    random.seed(11)
    trace_id, span_id, flags, record = recorder.start("s", SpanKind.SERVER, parent, 1, {})
    context = made.get_span_context()
    assert (trace_id, span_id, flags) == (context.trace_id, context.span_id, int(context.trace_flags))
    assert (record is not None) == made.is_recording()
    if record is not None:
        assert (record.state or TraceState()) == context.trace_state


def test_a_true_and_a_one_are_told_apart_by_the_encoding() -> None:
    recorder, _ = _recorder()
    records = []
    for value in (True, 1, 1.0, "1"):  # equal or alike as keys of the cache of encoded fields; not as values
        record = recorder.start("s", SpanKind.SERVER, None, 1, {"a": value})[3]
        record.end = 2
        records.append(record)
    ours, sdks = _as_the_sdk_encodes(records, recorder)
    assert ours == sdks
    values = [span.attributes[0].value.WhichOneof("value") for span in ours.resource_spans[0].scope_spans[0].spans]
    assert values == ["bool_value", "int_value", "double_value", "string_value"]


@pytest.mark.parametrize("header", [
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
    " 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03\t", "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what-comes-later", "garbage", "",
    "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",
    "00-00000000000000000000000000000000-b7ad6b7169203331-01", "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
    "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", "00-0af7651916cd43dd8448eb211c80319_-b7ad6b7169203331-01",
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" + "-x" * 300,
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0g", "00-0af7651916cd43dd8448eb211c80319c+b7ad6b7169203331-01",
    "00-0af7651916cd43dd8448eb211c8031+c-b7ad6b7169203331-01", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b71692033 1-01"])
def test_a_traceparent_is_read_as_the_sdks_propagator_reads_it(header: str) -> None:
    extracted = trace.get_current_span(TraceContextTextMapPropagator().extract({"traceparent": header}))
    expected = extracted.get_span_context()
    parsed = parse_traceparent(header)
    if not expected.is_valid:
        assert parsed is None
    else:
        assert parsed == Parent(expected.trace_id, expected.span_id, int(expected.trace_flags), True)
