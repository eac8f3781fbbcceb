"""A span's scalar attribute as its serialized `attributes` field, written by hand as protobuf writes a KeyValue.

Why by hand: the worker's batch span carries counts that change from batch to batch (its size, tokens, padded
tokens), so their pairs are new to span_encoding's cache most of the time, and each new one went through the
protobuf runtime (a Span, a KeyValue, a serialization). Once a batch, between forwards that evict the CPU's caches,
that path cost the worker about 38 us a batch of 14 (measured with a 64 MiB sweep between batches, as the loaded
worker's caches are); these few byte joins cost a fraction of it. tests/unit/test_attribute_wire.py compares
their bytes with protobuf's.
"""

from __future__ import annotations

import struct
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span


def _key(field: Any, wire_type: int) -> bytes:
    return bytes((field.number << 3 | wire_type,))


_ATTRIBUTE = _key(Span.DESCRIPTOR.fields_by_name["attributes"], 2)
_PAIR_KEY, _PAIR_VALUE = (_key(KeyValue.DESCRIPTOR.fields_by_name[name], 2) for name in ("key", "value"))
_VALUE = AnyValue.DESCRIPTOR.fields_by_name
_STRING, _BOOL = _key(_VALUE["string_value"], 2), _key(_VALUE["bool_value"], 0)
_INT, _DOUBLE = _key(_VALUE["int_value"], 0), _key(_VALUE["double_value"], 1)
_TRUE, _FALSE = _BOOL + b"\x01", _BOOL + b"\x00"
_double = struct.Struct("<d").pack
_INT64_LOW, _INT64_END, _UINT64 = -(2**63), 2**63, 2**64 - 1


def varint(number: int) -> bytes:
    """A non-negative int as protobuf's base-128 varint."""
    if number < 0x80:
        return bytes((number,))
    out = bytearray()
    while number > 0x7F:
        out.append(number & 0x7F | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def _delimited(tag: bytes, data: bytes) -> bytes:
    return tag + varint(len(data)) + data


def scalar_pair(key: str, value: Any) -> bytes | None:
    """The `attributes` field of a str, bool, int or float value; None where protobuf must be asked instead (a value
    of another type, an int outside int64, text that is not UTF-8): it refuses those, or writes them its own way."""
    kind = type(value)
    try:
        if kind is str:
            written = _delimited(_STRING, value.encode())
        elif kind is bool:
            written = _TRUE if value else _FALSE
        elif kind is int:
            if not _INT64_LOW <= value < _INT64_END:
                return None
            written = _INT + varint(value & _UINT64)  # a negative one as its 64-bit two's complement, as protobuf
        elif kind is float:
            written = _DOUBLE + _double(value)
        else:
            return None
        named = _delimited(_PAIR_KEY, key.encode()) if key else b""  # proto3 leaves an empty key out
    except (UnicodeEncodeError, AttributeError):  # a lone surrogate; a key that is not text
        return None
    return _delimited(_ATTRIBUTE, named + _delimited(_PAIR_VALUE, written))
