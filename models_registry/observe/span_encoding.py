"""A finished span's OTLP Span message, serialized as it ends (observe.span_export queues the bytes).

The SDK's encoder builds each attribute, span and scope as its own protobuf message and copies it into its
parent (about 23 us for a web span here); setting every field of one message in place took 11-12 us. Here
a span's bytes are the concatenation of its fields' parts (protobuf reads a message's fields in any order,
and a repeated field's elements in the order they come): the ids and times written as their fixed-size
fields, the name, kind, flags and status serialized once per process for all spans that share them, each
scalar attribute pair likewise, and through the message class only what few spans have (a tracestate,
events, links, what the limits dropped): 6 us for that web span. All but the ids, times and rare fields
are then kept per combination (a route's requests for one model, token and status share them): the
request's span is two struct packs and a dict lookup. tests/unit/test_span_export.py decodes
these and the SDK's encoding of the same spans and compares them message for message.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.proto.trace.v1.trace_pb2 import Span, SpanFlags
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from models_registry.observe.attribute_wire import scalar_pair

logger = logging.getLogger(__name__)

_HAS_IS_REMOTE = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_IS_REMOTE = SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_KINDS = {kind: Span.SpanKind.Value(f"SPAN_KIND_{kind.name}") for kind in SpanKind}


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
        set_attributes(target.kvlist_value.values, value)
    else:
        raise TypeError(f"Invalid type {type(value)} of value {value}")


def set_attributes(target: Any, attributes: Mapping[str, Any] | None) -> None:
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


def _flags(remote: bool) -> int:
    """A span's or a link's OTLP flags: whether its (parent's) context came from another process."""
    return _HAS_IS_REMOTE | _IS_REMOTE if remote else _HAS_IS_REMOTE


def _tag(name: str, wire_type: int) -> bytes:
    """A Span field's key as it is written before its value (field number << 3 | wire type, one byte here)."""
    return bytes((Span.DESCRIPTOR.fields_by_name[name].number << 3 | wire_type,))


_TRACE_ID, _SPAN_ID = _tag("trace_id", 2) + b"\x10", _tag("span_id", 2) + b"\x08"  # bytes, their lengths 16 and 8
_PARENT = _tag("parent_span_id", 2) + b"\x08"
_START, _END = _tag("start_time_unix_nano", 1)[0], _tag("end_time_unix_nano", 1)[0]  # fixed64
# The ids are big-endian bytes (the trace id as its two halves), the times little-endian fixed64: one pack each.
_ids = struct.Struct(">2sQQ2sQ").pack
_IDS_AND_PARENT, _TIMES = struct.Struct(">2sQQ2sQ2sQ"), struct.Struct("<BQBQ")
_ids_and_parent, _times = _IDS_AND_PARENT.pack, _TIMES.pack
_LOW_64 = (1 << 64) - 1


_shared: dict[tuple[Any, ...], bytes] = {}  # (name, kind, parent remote, status code, message) -> those fields


def _shared_fields(name: str, kind: SpanKind, remote: bool, code: Any, message: str | None) -> bytes:
    """The fields many spans share (name, kind, flags, status; code None: no status), serialized once per process."""
    key = (name, kind, remote, code, message)
    found = _shared.get(key)
    if found is None:
        target = Span(name=name, kind=_KINDS[kind], flags=_flags(remote))
        if code is not None:
            target.status.SetInParent()
            target.status.code = code.value
            if message:
                target.status.message = message
        found = target.SerializePartialToString()
        if len(_shared) >= MAX_PAIRS:  # names are routes' and the worker's few; messages an exception's: bounded
            _shared.clear()
        _shared[key] = found
    return found


def _set_events(target: Any, events: Sequence[Any]) -> None:
    for event in events:
        encoded = target.events.add()
        encoded.name = event.name
        encoded.time_unix_nano = event.timestamp
        set_attributes(encoded.attributes, event.attributes)
        encoded.dropped_attributes_count = event.dropped_attributes


def _rare_fields(span: ReadableSpan) -> bytes:
    """What few spans have (a tracestate, events, links, what the limits dropped), as the SDK's _encode_span."""
    context = span.get_span_context()
    if not (context.trace_state or span.events or span.links or span.dropped_attributes or span.dropped_events
            or span.dropped_links):
        return b""
    target = Span()
    if context.trace_state:
        target.trace_state = ",".join(f"{key}={value}" for key, value in context.trace_state.items())
    target.dropped_attributes_count = span.dropped_attributes
    _set_events(target, span.events)
    target.dropped_events_count = span.dropped_events
    for link in span.links:
        encoded = target.links.add()
        encoded.trace_id = link.context.trace_id.to_bytes(16, "big")
        encoded.span_id = link.context.span_id.to_bytes(8, "big")
        set_attributes(encoded.attributes, link.attributes)
        encoded.dropped_attributes_count = link.dropped_attributes
        encoded.flags = _flags(link.context is not None and link.context.is_remote)
    target.dropped_links_count = span.dropped_links
    return target.SerializePartialToString()


_SCALARS = (str, int, bool, float)
_pairs: dict[tuple[str, type, Any], bytes] = {}  # (key, type, value) -> the span's attribute field, serialized
MAX_PAIRS = 4096


def _attribute_fields(attributes: Mapping[str, Any]) -> tuple[bytes, bool]:
    """A span's attributes as its serialized `attributes` fields, each scalar pair encoded once per process;
    and whether every one was (False: one was left out, and is logged again with the next span that has it).

    Most pairs repeat from span to span (the method, the route, the model, its version, the status), and
    setting a KeyValue through the protobuf runtime costs about 1 us; a dict lookup a tenth of that.
    """
    out, whole = [], True
    for key, value in attributes.items():
        scalar = type(value) in _SCALARS
        cached = _pairs.get((key, type(value), value)) if scalar else None
        if cached is None:
            cached = scalar_pair(key, value) if scalar else None
            if cached is None:  # what protobuf writes its own way, or refuses (logged and left out)
                holder = Span()
                set_attributes(holder.attributes, {key: value})
                cached = holder.SerializePartialToString()
            if cached and scalar:  # one left out is logged each time, as the SDK does
                if len(_pairs) >= MAX_PAIRS:  # paths and values a client makes up: never unbounded
                    _pairs.clear()
                _pairs[(key, type(value), value)] = cached
            whole = whole and bool(cached)
        out.append(cached)
    return b"".join(out), whole


def encode_span(span: ReadableSpan) -> bytes:
    """One finished span as a serialized OTLP Span message, the concatenation of its fields' parts (protobuf
    takes a message's fields in any order, and a repeated field's elements in the order they come)."""
    context, parent, status = span.get_span_context(), span.parent, span.status
    return _span_fields(span.name, span.kind, context.trace_id, context.span_id, parent.span_id if parent else 0,
                        parent is not None and parent.is_remote, span.start_time or 0, span.end_time or 0,
                        status.status_code if status else StatusCode.UNSET, status.description if status else None,
                        span.attributes or {}, _rare_fields(span))


_LINK = _tag("links", 2)
_LINK_TRACE_ID = bytes((Span.Link.DESCRIPTOR.fields_by_name["trace_id"].number << 3 | 2, 16))
_LINK_SPAN_ID = bytes((Span.Link.DESCRIPTOR.fields_by_name["span_id"].number << 3 | 2, 8))
_LINK_FLAGS = bytes((Span.Link.DESCRIPTOR.fields_by_name["flags"].number << 3 | 5,))  # fixed32
_LINK_HEAD = _LINK + b"\x21" + _LINK_TRACE_ID  # the link's key and length (33), its trace id's key and length
_LINK_REMOTE = _LINK_FLAGS + struct.pack("<I", _flags(True))


def _link_fields(links: Sequence[bytes]) -> bytes:
    """A record's links (wire contexts, observe.trace_context: remote, no attributes), each a Span.Link written by
    hand from the context's own id bytes: 33 bytes after its key and length."""
    return b"".join([_LINK_HEAD + link[:16] + _LINK_SPAN_ID + link[16:24] + _LINK_REMOTE for link in links])


_tails: dict[tuple[Any, ...], bytes] = {}  # (name, kind, remote, status, message, attributes, their types) -> fields


def _span_fields(name: str, kind: SpanKind, trace_id: int, span_id: int, parent_id: int, remote: bool, start: int,
                 end: int, code: Any, message: str | None, attributes: Mapping[str, Any], rare: bytes = b"") -> bytes:
    """A span's bytes from its parts (parent_id 0: a root span; remote: its parent came from another process;
    rare: _link_fields and the like).

    The ids and times are fixed-size fields, written as protobuf lays them out (two packs).

    All but the ids, times and rare fields are serialized once per process for every span that shares them
    (a route's requests with the same model, token and status; the worker's spans of a model): one lookup
    instead of one per attribute. The values' types are in the key: True == 1, and they encode differently.
    """
    try:
        key: tuple[Any, ...] | None = (name, kind._value_, remote, code._value_, message, *attributes.items(),
                                       *map(type, attributes.values()))
        tail = _tails.get(key)  # type: ignore[arg-type]
    except TypeError:  # an unhashable value (a list): encoded each time
        key = tail = None
    if tail is None:
        pairs, whole = _attribute_fields(attributes) if attributes else (b"", True)
        tail = _shared_fields(name, kind, remote, code, message) + pairs
        if key is not None and whole:
            if len(_tails) >= MAX_PAIRS:  # paths, tokens and counts a client makes up: never unbounded
                _tails.clear()
            _tails[key] = tail
    if parent_id:
        ids = _ids_and_parent(_TRACE_ID, trace_id >> 64, trace_id & _LOW_64, _SPAN_ID, span_id, _PARENT, parent_id)
    else:
        ids = _ids(_TRACE_ID, trace_id >> 64, trace_id & _LOW_64, _SPAN_ID, span_id)
    return ids + _times(_START, start, _END, end) + tail + rare


# A child span's bytes before its tail: every parent has a span id (W3C forbids 0; parse_traceparent and
# wire_context refuse it), so every child's head has this size.
_IDS_AND_TIMES = _IDS_AND_PARENT.size + _TIMES.size


def encode_finished(name: str, kind: SpanKind, attributes: Mapping[str, Any],
                    spans: Sequence[tuple[int, int, Any, int, int]]) -> list[bytes]:
    """Child spans that share a name, kind and attributes, each (trace id, span id, parent, start, end), with
    nothing but those (status unset; parent without a tracestate), as encode_record writes the SpanRecord of each."""
    return [_span_fields(name, kind, trace_id, span_id, parent.span_id, parent.remote, start, end, StatusCode.UNSET,
                         None, attributes) for trace_id, span_id, parent, start, end in spans]


# A queue span's head: its ids as the wire context's bytes and a fresh span id's, the times little-endian.
_queued_head = struct.Struct("<2s16s2s8s2s8sBQBQ").pack


def encode_queued(name: str, kind: SpanKind, attributes: Mapping[str, Any], spans: Sequence[tuple[bytes, int]],
                  end: int, span_ids: bytes) -> list[bytes]:
    """Spans that share a name, kind, attributes and end, each the child of a remote parent named by its wire
    context (observe.trace_context), from its start (ns; end if later), with nothing but those (status unset, no
    tracestate), as encode_record writes the SpanRecord of each. span_ids: 8 bytes for each span, in order.

    The worker's queue span of every traced request in a batch: one struct pack a span, its ids sliced from the
    context as they came, before the tail all of them share (written once).
    """
    tail = _span_fields(name, kind, 1, 1, 1, True, 0, 0, StatusCode.UNSET, None, attributes)[_IDS_AND_TIMES:]
    out, at = [], 0
    for context, start in spans:
        out.append(_queued_head(_TRACE_ID, context[:16], _SPAN_ID, span_ids[at:at + 8], _PARENT, context[16:24],
                                _START, start if start < end else end, _END, end) + tail)
        at += 8
    return out


def encode_record(record: Any) -> bytes:
    """A SpanRecord (observe.span_record) as the serialized OTLP Span the SDK's encoder makes of its readable()."""
    rare = _link_fields(record.links) if record.links else b""
    dropped = getattr(record.attributes, "dropped", 0)  # BoundedAttributes, when span limits are set
    if record.state or record.events or record.dropped_links or dropped:
        target = Span()
        if record.state:
            target.trace_state = ",".join(f"{key}={value}" for key, value in record.state.items())
        _set_events(target, record.events)
        target.dropped_links_count = record.dropped_links
        target.dropped_attributes_count = dropped
        rare += target.SerializePartialToString()
    parent = record.parent
    return _span_fields(record.name, record.kind, record.trace_id, record.span_id,
                        parent.span_id if parent is not None else 0, parent is not None and parent.remote,
                        record.start, record.end, record.status, record.message, record.attributes, rare)
