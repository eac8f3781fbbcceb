"""A request's trace context: the W3C traceparent a client sends, and the 25 bytes the wire message carries from
the web to the worker.

The wire's bytes are the traceparent's fields in its order: the trace id (16, big-endian), the web's span id
(8), the trace flags (1). OTLP writes ids as these same big-endian bytes, so the worker slices them into its
queue spans and the batch span's links as they came, with no parse and no int a request (parse_traceparent
was the largest item of the traced worker's own code). Only our own wire message carries the bytes; a client's
traceparent header is text, as is the one an older web put in a wire message (wire_context reads both).
"""

from __future__ import annotations

import functools
import re
import struct
from typing import Any, NamedTuple

CONTEXT_SIZE = 25
FLAGS_AT = 24  # the trace flags' byte: context[FLAGS_AT] & 1 is the sampled flag
_CONTEXT = struct.Struct(">QQQB")
# (trace id >> 64, trace id & LOW_64, span id, flags): pack_context without its Python frame, for the web's
# one a request (observe.tracing.current_context).
pack_halves = _CONTEXT.pack
LOW_64 = (1 << 64) - 1
_NO_TRACE, NO_SPAN = bytes(16), bytes(8)


class Parent(NamedTuple):
    """A span's parent: its ids, W3C trace flags, whether it came from another process, and its tracestate."""

    trace_id: int
    span_id: int
    flags: int
    remote: bool
    state: Any = None  # an opentelemetry TraceState, or None for an empty one


# The W3C trace-context format as the SDK's TraceContextTextMapPropagator matches it.
_TRACEPARENT = re.compile("^[ \t]*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(?:(-.*)|[ \t]*)$")
MAX_TRACEPARENT = 512  # the propagator's limit
_new_parent = functools.partial(tuple.__new__, Parent)  # a Parent without its Python-level __new__
_HEX = frozenset("0123456789abcdef")


def parse_traceparent(value: str) -> Parent | None:
    """The remote parent a W3C traceparent names (no tracestate); None when it is malformed, as the SDK reads it.

    The shape every traceparent of version 00 has is read by position; any other through the regex.
    """
    if len(value) == 55 and value[:3] == "00-" and value[35] == "-" and value[52] == "-":
        version, trace_hex, span_hex, flags, rest = "00", value[3:35], value[36:52], value[53:], None
        if not (_HEX.issuperset(trace_hex) and _HEX.issuperset(span_hex) and _HEX.issuperset(flags)):
            return None  # that layout with a character outside [0-9a-f]: the regex would not match it either
    elif len(value) > MAX_TRACEPARENT:
        return None
    else:
        match = _TRACEPARENT.match(value)
        if match is None:
            return None
        version, trace_hex, span_hex, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if not trace_id or not span_id:
        return None
    return _new_parent((trace_id, span_id, int(flags, 16), True, None))  # type: ignore[no-any-return]


def pack_context(trace_id: int, span_id: int, flags: int) -> bytes:
    """The 25 bytes of a span's context (its trace id, its own span id, its W3C flags)."""
    return pack_halves(trace_id >> 64, trace_id & LOW_64, span_id, flags)


def parent_of(context: bytes) -> Parent:
    """The remote parent a wire context names (wire_context checked its ids)."""
    high, low, span_id, flags = _CONTEXT.unpack(context)
    return Parent(high << 64 | low, span_id, flags, True)


def wire_context(value: Any) -> bytes:
    """A wire message's trace context as the worker takes it: 25 bytes with both ids set, else b"" (none, or
    malformed: the request is served untraced). An older web's traceparent string is read as the SDK reads it."""
    if type(value) is bytes:
        if len(value) == CONTEXT_SIZE and value[:16] != _NO_TRACE and value[16:24] != NO_SPAN:
            return value
        return b""
    if isinstance(value, str) and value:
        parent = parse_traceparent(value)
        return pack_context(parent.trace_id, parent.span_id, parent.flags) if parent is not None else b""
    return b""
