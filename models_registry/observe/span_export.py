"""Sampled spans encoded as they end, queued as bytes by the SDK's BatchSpanProcessor, sent by its OTLP/HTTP exporter.

With every request sampled, most of a span's cost was not its creation but what came after it: the SDK's
batch queue holds each finished span object (its context, attributes, events, links, status: a dozen
objects the garbage collector tracks) until the export, long enough for them all to reach the oldest
generation, whose full collections walk the process' whole heap; then the exporter's encode_spans builds
each attribute, span and scope as its own protobuf message and copies it into its parent (about 55 us a
span). Here each span is written to its OTLP bytes when it ends (observe.span_encoding, about 6 us); the
queue holds those bytes; the export frames them into the ExportTraceServiceRequest the SDK's encoder would have
made (tests/unit/test_span_export.py decodes both and compares them). The batching, its OTEL_BSP_*
settings, and the exporter's endpoint, headers, TLS, compression, timeout and retries are the SDK's own.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
from opentelemetry.trace import SpanContext, TraceFlags

from models_registry.observe.attribute_wire import varint
from models_registry.observe.otlp_transport import lean_transport
from models_registry.observe.span_encoding import encode_span, set_attributes

logger = logging.getLogger(__name__)

_EXPORTER_PARTS = ("_shutdown", "_metrics", "_max_request_size", "_client")  # what export() below reads


class EncodedSpan:
    """A finished span as the batch queue holds it: its OTLP bytes, and the resource and scope it is sent under."""

    __slots__ = ("data", "resource", "scope")
    # BatchSpanProcessor.on_end reads only context.trace_flags.sampled of what it queues: these were sampled.
    context = SpanContext(trace_id=1, span_id=1, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))

    def __init__(self, data: bytes, resource: Any, scope: Any) -> None:
        self.data, self.resource, self.scope = data, resource, scope


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field: how a repeated message field's elements are written, one by one."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


_RESOURCE_SPANS = ExportTraceServiceRequest.DESCRIPTOR.fields_by_name["resource_spans"].number
_SCOPE_SPANS = ResourceSpans.DESCRIPTOR.fields_by_name["scope_spans"].number
_SPANS = ScopeSpans.DESCRIPTOR.fields_by_name["spans"].number


def _parts_of(span: Any, bare: tuple[Any, Any] | None) -> tuple[bytes, Any, Any]:
    """(bytes, resource, scope) of a queued span: an EncodedSpan, or a record's bare bytes (sent under bare)."""
    if type(span) is bytes:
        if bare is None:
            raise ValueError("bare span bytes queued with no resource to send them under")
        return span, bare[0], bare[1]
    return span.data, span.resource, span.scope


_span_heads: dict[int, bytes] = {}  # a span's length -> its `spans` field's key and length, as they precede it
_MAX_HEADS = 4096


def _framed_spans(datas: Sequence[bytes]) -> bytes:
    """Spans' bytes as the elements of ScopeSpans.spans, each after its field key and length.

    Spans of a process come in a few hundred lengths: a dict lookup per span instead of two varints (the export
    thread framed a batch of 512 in 0.5-0.7 ms that way; it shares the GIL with the requests).
    """
    heads, parts = _span_heads, []
    for data in datas:
        head = heads.get(len(data))
        if head is None:
            if len(heads) >= _MAX_HEADS:
                heads.clear()
            head = heads[len(data)] = varint(_SPANS << 3 | 2) + varint(len(data))
        parts.append(head)
        parts.append(data)
    return b"".join(parts)


def _groups(spans: Sequence[Any], bare: tuple[Any, Any] | None) -> list[tuple[Any, list[tuple[Any, list[bytes]]]]]:
    """The queued spans' bytes by resource, then scope: [(resource, [(scope, [bytes, ...]), ...]), ...]."""
    if bare is not None and all(type(span) is bytes for span in spans):  # the usual batch: one process' records
        return [(bare[0], [(bare[1], list(spans))])]
    # Keyed by identity: a Resource hashes by dumping its attributes as JSON (as the SDK's encoder does, per span).
    groups: dict[int, tuple[Any, dict[int, tuple[Any, list[bytes]]]]] = {}
    for span in spans:
        data, resource, scope = _parts_of(span, bare)
        scopes = groups.setdefault(id(resource), (resource, {}))[1]
        scopes.setdefault(id(scope), (scope, []))[1].append(data)
    return [(resource, list(scopes.values())) for resource, scopes in groups.values()]


def request_body(spans: Sequence[Any], bare: tuple[Any, Any] | None = None) -> bytes:
    """The serialized ExportTraceServiceRequest of queued spans, grouped by resource, then instrumentation scope.

    spans: EncodedSpans, or bare bytes (this process' records, observe.span_recorder) sent under bare:
    (resource, scope).

    Each group's envelope is built with the message classes; the spans' bytes are appended to it as the
    elements of its repeated field (protobuf merges a message's fields in whatever order they come).
    """
    body = []
    for resource, scopes in _groups(spans, bare):
        envelope = ResourceSpans()
        envelope.resource.SetInParent()
        set_attributes(envelope.resource.attributes, resource.attributes)
        if resource.schema_url:
            envelope.schema_url = resource.schema_url
        parts = [envelope.SerializePartialToString()]
        for scope, datas in scopes:
            group = ScopeSpans()
            group.scope.SetInParent()
            if scope is not None:
                group.scope.name = scope.name
                if scope.version:
                    group.scope.version = scope.version
                set_attributes(group.scope.attributes, scope.attributes)
                if scope.schema_url:
                    group.schema_url = scope.schema_url
            parts.append(_field(_SCOPE_SPANS, group.SerializePartialToString() + _framed_spans(datas)))
        body.append(_field(_RESOURCE_SPANS, b"".join(parts)))
    return b"".join(body)


class SpanQueue:
    """Where a process' span bytes go: the SDK batch processor's own queue while it is below a batch (room), else
    its emit().

    The SDK's emit() is a Python frame and a getpid() per span; below a batch it does nothing but append
    to its queue (the export is due at a full batch or on the schedule; a fork reinitialises the processor,
    this deque included, through os.register_at_fork). So put_all appends itself while there is room, and
    hands a span at a batch's size (the export's wake-up), past it, or after shutdown to emit(), which does
    all the SDK does.
    """

    __slots__ = ("emit", "deque", "room")

    def __init__(self, emit: Callable[[bytes], None], deque: Any = None, room: int = 0) -> None:
        if not isinstance(deque, collections.deque):  # not the SDK's queue as we know it: emit() every span
            deque, room = (), 0
        self.emit, self.deque, self.room = emit, deque, room

    def put_all(self, datas: Sequence[bytes]) -> None:
        """Queue spans' bytes (a batch's queue spans at once: one append for all of them while there is room)."""
        deque, emit = self.deque, self.emit
        if len(deque) + len(datas) <= self.room:
            deque.extendleft(datas)  # type: ignore[union-attr]  # as appendleft of each in turn
            return
        for data in datas:
            if len(deque) < self.room:
                deque.appendleft(data)  # type: ignore[union-attr]
            else:
                emit(data)


class EncodingSpanProcessor(SpanProcessor):
    """Each sampled span encoded as it ends, handed to the SDK's BatchSpanProcessor as its bytes.

    The batch queue then holds one small object a span instead of the span's dozen (its context, attributes,
    events, links, status): they are freed at once instead of living on through the garbage collector's
    generations until the export, which is what most of the cost of a sampled span was.
    """

    def __init__(self, batch: BatchSpanProcessor) -> None:
        self._batch = batch
        self._queues: list[SpanQueue] = []  # bytes_queue's: shut with the processor

    def on_end(self, span: ReadableSpan) -> None:
        """Encode a sampled span and queue it; a span that cannot be encoded is logged and dropped."""
        if span.context is None or not span.context.trace_flags.sampled:
            return
        try:
            data = encode_span(span)
        except Exception as error:  # noqa: BLE001 - never raised into the request that ended the span
            logger.error("span %s not exported: %s", span.name, error)
            return
        queued = EncodedSpan(data, span.resource, span.instrumentation_scope or None)
        self._batch.on_end(queued)  # type: ignore[arg-type]

    def bytes_queue(self, resource: Any, scope: Any) -> SpanQueue:
        """Where a span's OTLP bytes are queued, exported under resource and scope (observe.span_recorder's
        records: all of one process' share them).

        Bare bytes where the batch processor's queue takes them (the SDK's BatchProcessor.emit): the garbage
        collector does not track bytes, and what the queue holds lives long enough to reach its oldest
        generation, whose full collections walk the whole heap. Else an EncodedSpan each.
        """
        exporter = self._batch.span_exporter
        batch = getattr(self._batch, "_batch_processor", None)
        emit = getattr(batch, "emit", None)
        if isinstance(exporter, EncodedSpanExporter) and callable(emit):
            exporter.bare = (resource, scope)
            deque, most = getattr(batch, "_queue", None), getattr(batch, "_max_export_batch_size", None)
            self._queues.append(queue := SpanQueue(emit, deque, most - 1 if isinstance(most, int) else 0))
            return queue
        return SpanQueue(lambda data: self._batch.on_end(EncodedSpan(data, resource, scope)))  # type: ignore[arg-type]

    def shutdown(self) -> None:
        """Export what is queued, then stop (the batch processor's shutdown)."""
        for queue in self._queues:
            queue.room = 0  # from now on through the SDK's emit, which refuses and counts what comes after
        self._batch.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export what is queued now."""
        return self._batch.force_flush(timeout_millis)


class EncodedSpanExporter(OTLPSpanExporter):
    """The SDK's OTLPSpanExporter for EncodingSpanProcessor's spans: its export() as the SDK's (1.45), the
    request's body framed from the spans' bytes instead of encode_spans() of span objects."""

    bare: tuple[Any, Any] | None = None  # what bare bytes in the queue are sent under (bytes_queue)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        client = getattr(self, "_client", None)
        if "_transport" not in kwargs and hasattr(client, "_transport") and hasattr(client, "_endpoint"):
            client._transport = lean_transport(client._transport, client._endpoint)  # type: ignore[union-attr]

    @classmethod
    def fits(cls) -> bool:
        """Whether the installed exporter still has the parts export() uses (else: use the SDK's as it is)."""
        try:
            probe = cls(endpoint="http://127.0.0.1:9/v1/traces")
        except Exception:  # noqa: BLE001 - any failure means: not this exporter
            return False
        found = all(hasattr(probe, name) for name in _EXPORTER_PARTS) and hasattr(probe._client, "export")
        probe.shutdown()
        return found

    def export(self, spans: Sequence[EncodedSpan]) -> SpanExportResult:  # type: ignore[override]
        """Send the spans with the SDK's client (its retries and timeout)."""
        if self._shutdown:
            return super().export([])  # the SDK's warning and failure
        with self._metrics.export_operation(len(spans)) as result:
            body = request_body(spans, self.bare)
            if 0 < self._max_request_size < len(body):
                logger.warning("Dropping span batch: serialized size %d bytes exceeds max_request_size %d bytes.",
                               len(body), self._max_request_size)
                result.error = ValueError(f"span batch of {len(body)} bytes over {self._max_request_size}")
                return SpanExportResult.FAILURE
            sent = self._client.export(body)
            if not sent.success:
                result.error = sent.error
                result.error_attrs = ({"http.response.status_code": sent.status_code}
                                      if sent.status_code is not None else None)
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS
