"""observe.attribute_wire: a scalar attribute's field, written by hand, is byte for byte protobuf's."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from models_registry.observe.attribute_wire import scalar_pair


def _protobufs(key: str, value: Any) -> bytes:
    holder = Span()
    pair = holder.attributes.add()
    pair.key = key
    if type(value) is str:
        pair.value.string_value = value
    elif type(value) is bool:
        pair.value.bool_value = value
    elif type(value) is int:
        pair.value.int_value = value
    else:
        pair.value.double_value = value
    return holder.SerializePartialToString()


def _values() -> list[Any]:
    draw = random.Random(20261130)
    edges = [0, 1, -1, 127, 128, 255, 16383, 16384, 2**31 - 1, -(2**31), 2**62, 2**63 - 1, -(2**63)]
    ints = edges + [draw.randrange(-(2**63), 2**63) >> draw.randrange(64) for _ in range(300)]
    floats = [0.0, -0.0, 1.5, -2.25, math.inf, -math.inf, 1e-310, 1.7976931348623157e308,
              *(draw.uniform(-1e9, 1e9) for _ in range(50))]
    texts = ["", "a", "ünïcode ✓", "日本", "x" * 127, "y" * 128, "z" * 20000,
             *("".join(chr(draw.randrange(32, 0x2FFF)) for _ in range(draw.randrange(40))) for _ in range(50))]
    return [True, False, *ints, *floats, *texts]


@pytest.mark.parametrize("key", ["hosting.batch.tokens", "", "ключ", "k" * 200])
def test_each_scalar_is_written_as_protobuf_writes_it(key: str) -> None:
    for value in _values():
        assert scalar_pair(key, value) == _protobufs(key, value), (key, value)


def test_a_nan_is_a_double_that_decodes_to_nan() -> None:
    decoded = Span.FromString(scalar_pair("n", math.nan))  # type: ignore[arg-type]
    assert math.isnan(decoded.attributes[0].value.double_value)


@pytest.mark.parametrize("key, value", [("big", 2**63), ("small", -(2**63) - 1), ("surrogate", "\ud800"),
                                        ("\udfff", 1), ("bytes", b"\x00"), ("none", None), ("list", [1]),
                                        ("subclass", type("Text", (str,), {})("x"))])
def test_what_protobuf_must_decide_is_left_to_it(key: str, value: Any) -> None:
    assert scalar_pair(key, value) is None
