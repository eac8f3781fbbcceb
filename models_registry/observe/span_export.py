"""Sampled spans encoded as they end, queued as bytes by the SDK's BatchSpanProcessor, sent by its OTLP/HTTP exporter.

With every request sampled, most of a span's cost was not its creation but what came after it: the SDK's
batch queue holds each finished span object (its context, attributes, events, links, status: a dozen
objects the garbage collector tracks) until the export, long enough for them all to reach the oldest
generation, whose full collections walk the process' whole heap; then the exporter's encode_spans builds
each attribute, span and scope as its own protobuf message and copies it into its parent (about 55 us a
span). Here each span is written once, in place, to its OTLP bytes when it ends (about 8 us); the queue
holds those bytes; the export frames them into the ExportTraceServiceRequest the SDK's encoder would have
made (tests/unit/test_span_export.py decodes both and compares them). The batching, its OTEL_BSP_*
settings, and the exporter's endpoint, headers, TLS, compression, timeout and retries are the SDK's own.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, SpanFlags
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

logger = logging.getLogger(__name__)

_HAS_IS_REMOTE = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_IS_REMOTE = SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_KINDS = {kind: Span.SpanKind.Value(f"SPAN_KIND_{kind.name}") for kind in SpanKind}
_EXPORTER_PARTS = ("_shutdown", "_metrics", "_max_request_size", "_client")  # what export() below reads


def _set_value(target: Any, value: Any) -> None:
    """An AnyValue's field from an attribute value (as the SDK's _encode_value, without the copies)."""
    kind = type(value)
    if kind is str:
        target.string_value = value
    elif kind is bool:
        target.bool_value = value
    elif kind is int:
        target.int_value = value
    elif kind is float:
        target.double_value = value
    elif value is None:  # an empty value, present (as the SDK's encoder writes it)
        target.SetInParent()
    elif isinstance(value, bytes):
        target.bytes_value = value
    elif isinstance(value, str):  # a subclass of one of the above
        target.string_value = value
    elif isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int):
        target.int_value = value
    elif isinstance(value, float):
        target.double_value = value
    elif isinstance(value, Sequence):
        values = target.array_value.values
        for item in value:
            _set_value(values.add(), item)
    elif isinstance(value, Mapping):
        _set_attributes(target.kvlist_value.values, value)
    else:
        raise TypeError(f"Invalid type {type(value)} of value {value}")


def _set_attributes(target: Any, attributes: Mapping[str, Any] | None) -> None:
    """Append each attribute as a KeyValue to a repeated field; one of an unknown type is logged and left out."""
    if not attributes:
        return
    for key, value in attributes.items():
        pair = target.add()
        pair.key = str(key)
        try:
            _set_value(pair.value, value)
        except Exception as error:  # noqa: BLE001 - as the SDK's encoder: the attribute is left out, logged
            del target[-1]
            logger.error("span attribute %s not exported: %s", key, error)


def _flags(context: Any) -> int:
    return _HAS_IS_REMOTE | _IS_REMOTE if context is not None and context.is_remote else _HAS_IS_REMOTE


def _set_span(target: Any, span: ReadableSpan) -> None:
    """One span's fields, in place (as the SDK's _encode_span)."""
    context = span.get_span_context()
    target.trace_id = context.trace_id.to_bytes(16, "big")
    target.span_id = context.span_id.to_bytes(8, "big")
    if context.trace_state:
        target.trace_state = ",".join(f"{key}={value}" for key, value in context.trace_state.items())
    parent = span.parent
    if parent:
        target.parent_span_id = parent.span_id.to_bytes(8, "big")
    target.flags = _flags(parent)
    target.name = span.name
    target.kind = _KINDS[span.kind]
    target.start_time_unix_nano = span.start_time or 0
    target.end_time_unix_nano = span.end_time or 0
    target.dropped_attributes_count = span.dropped_attributes
    for event in span.events:
        encoded = target.events.add()
        encoded.name = event.name
        encoded.time_unix_nano = event.timestamp
        _set_attributes(encoded.attributes, event.attributes)
        encoded.dropped_attributes_count = event.dropped_attributes
    target.dropped_events_count = span.dropped_events
    for link in span.links:
        encoded = target.links.add()
        encoded.trace_id = link.context.trace_id.to_bytes(16, "big")
        encoded.span_id = link.context.span_id.to_bytes(8, "big")
        _set_attributes(encoded.attributes, link.attributes)
        encoded.dropped_attributes_count = link.dropped_attributes
        encoded.flags = _flags(link.context)
    target.dropped_links_count = span.dropped_links
    status = span.status
    if status is not None:
        target.status.SetInParent()
        target.status.code = status.status_code.value
        if status.description:
            target.status.message = status.description


_SCALARS = (str, int, bool, float)
_pairs: dict[tuple[str, type, Any], bytes] = {}  # (key, type, value) -> the span's attribute field, serialized
MAX_PAIRS = 4096


def _attribute_fields(attributes: Mapping[str, Any]) -> bytes:
    """A span's attributes as its serialized `attributes` fields, each scalar pair encoded once per process.

    Most pairs repeat from span to span (the method, the route, the model, its version, the status), and
    setting a KeyValue through the protobuf runtime costs about 1 us; a dict lookup a tenth of that.
    """
    out = []
    for key, value in attributes.items():
        cached = _pairs.get((key, type(value), value)) if type(value) in _SCALARS else None
        if cached is None:
            holder = Span()
            _set_attributes(holder.attributes, {key: value})
            cached = holder.SerializePartialToString()
            if cached and type(value) in _SCALARS:  # one left out is logged each time, as the SDK does
                if len(_pairs) >= MAX_PAIRS:  # paths and values a client makes up: never unbounded
                    _pairs.clear()
                _pairs[(key, type(value), value)] = cached
        out.append(cached)
    return b"".join(out)


def encode_span(span: ReadableSpan) -> bytes:
    """One finished span as a serialized OTLP Span message (its attributes' fields appended: protobuf takes a
    message's fields in any order, a repeated field's elements in the order they come)."""
    message = Span()
    _set_span(message, span)
    data = message.SerializePartialToString()
    return data + _attribute_fields(span.attributes) if span.attributes else data


class EncodedSpan:
    """A finished span as the batch queue holds it: its OTLP bytes, and the resource and scope it is sent under."""

    __slots__ = ("data", "resource", "scope")
    # BatchSpanProcessor.on_end reads only context.trace_flags.sampled of what it queues: these were sampled.
    context = SpanContext(trace_id=1, span_id=1, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))

    def __init__(self, data: bytes, resource: Any, scope: Any) -> None:
        self.data, self.resource, self.scope = data, resource, scope


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field: how a repeated message field's elements are written, one by one."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


_RESOURCE_SPANS = ExportTraceServiceRequest.DESCRIPTOR.fields_by_name["resource_spans"].number
_SCOPE_SPANS = ResourceSpans.DESCRIPTOR.fields_by_name["scope_spans"].number
_SPANS = ScopeSpans.DESCRIPTOR.fields_by_name["spans"].number


def request_body(spans: Sequence[EncodedSpan]) -> bytes:
    """The serialized ExportTraceServiceRequest of encoded spans, grouped by resource, then instrumentation scope.

    Each group's envelope is built with the message classes; the spans' bytes are appended to it as the
    elements of its repeated field (protobuf merges a message's fields in whatever order they come).
    """
    # Keyed by identity: a Resource hashes by dumping its attributes as JSON (as the SDK's encoder does, per span).
    groups: dict[int, tuple[Any, dict[int, tuple[Any, list[bytes]]]]] = {}
    for span in spans:
        scopes = groups.setdefault(id(span.resource), (span.resource, {}))[1]
        scopes.setdefault(id(span.scope), (span.scope, []))[1].append(span.data)
    body = []
    for resource, scopes in groups.values():
        envelope = ResourceSpans()
        envelope.resource.SetInParent()
        _set_attributes(envelope.resource.attributes, resource.attributes)
        if resource.schema_url:
            envelope.schema_url = resource.schema_url
        parts = [envelope.SerializePartialToString()]
        for scope, datas in scopes.values():
            group = ScopeSpans()
            group.scope.SetInParent()
            if scope is not None:
                group.scope.name = scope.name
                if scope.version:
                    group.scope.version = scope.version
                _set_attributes(group.scope.attributes, scope.attributes)
                if scope.schema_url:
                    group.schema_url = scope.schema_url
            parts.append(_field(_SCOPE_SPANS, group.SerializePartialToString()
                                + b"".join([_field(_SPANS, data) for data in datas])))
        body.append(_field(_RESOURCE_SPANS, b"".join(parts)))
    return b"".join(body)


class EncodingSpanProcessor(SpanProcessor):
    """Each sampled span encoded as it ends, handed to the SDK's BatchSpanProcessor as its bytes.

    The batch queue then holds one small object a span instead of the span's dozen (its context, attributes,
    events, links, status): they are freed at once instead of living on through the garbage collector's
    generations until the export, which is what most of the cost of a sampled span was.
    """

    def __init__(self, batch: BatchSpanProcessor) -> None:
        self._batch = batch

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

    def shutdown(self) -> None:
        """Export what is queued, then stop (the batch processor's shutdown)."""
        self._batch.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export what is queued now."""
        return self._batch.force_flush(timeout_millis)


class EncodedSpanExporter(OTLPSpanExporter):
    """The SDK's OTLPSpanExporter for EncodingSpanProcessor's spans: its export() as the SDK's (1.45), the
    request's body framed from the spans' bytes instead of encode_spans() of span objects."""

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
            body = request_body(spans)
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
