"""api.openai.tool_call_deltas: a call's arguments released piece by piece, joined the whole call."""

from __future__ import annotations

import json

import pytest

from models_registry.api.openai.tool_call_deltas import ArgumentsStream

CALL = '{"name": "get_weather", "arguments": {"city": "Paris {not a brace}", "unit": "c\\"}", "days": {"n": 3}}}'


def _fed(text: str, size: int) -> list[dict]:
    stream = ArgumentsStream(0, "call_x")
    return [d for at in range(0, len(text), size) for d in stream.feed(text[at:at + size])]


@pytest.mark.parametrize("size", [1, 2, 5, 17, 1000])
def test_pieces_join_to_the_whole_call(size: int) -> None:
    deltas = _fed(CALL + "</tool_call>", size)
    opening, rest = deltas[0], deltas[1:]
    assert opening == {"index": 0, "id": "call_x", "type": "function",
                       "function": {"name": "get_weather", "arguments": ""}}
    assert all(set(d) == {"index", "function"} and d["index"] == 0 for d in rest)
    joined = "".join(d["function"]["arguments"] for d in rest)
    assert json.loads(joined) == json.loads(CALL)["arguments"]


def test_arguments_arrive_before_the_call_is_whole() -> None:
    stream = ArgumentsStream(1)
    assert stream.feed('{"name": "f", ') == []
    assert stream.feed('"arguments": {"a": ')[0]["function"]["name"] == "f"
    assert stream.feed('"12') == [{"index": 1, "function": {"arguments": '"12'}}]
    assert stream.feed('"}} trailing') == [{"index": 1, "function": {"arguments": '"}'}}]
    assert stream.feed("more") == []
