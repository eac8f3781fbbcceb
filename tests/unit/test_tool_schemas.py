"""api.openai.tool_schemas and tool_grammar: tools validated with 400s naming the field; a forced call's grammar."""

from __future__ import annotations

import json
from typing import Any

import llguidance
import pytest

from models_registry.api.openai import tool_grammar
from models_registry.api.openai.generation_requests import read
from models_registry.api.openai.tool_calls import parse
from models_registry.api.openai.tool_schemas import read_tools, tool_turn, with_result_names
from models_registry.core.errors import InvalidInput
from models_registry.tasks.json_grammar import EOS, PREFERRED, quiet_limits
from models_registry.tasks.schema_bounds import MAX_DEPTH

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string", "enum": ["Paris", "Rome"]},
                                                "days": {"type": "integer", "minimum": 1, "maximum": 3}},
                                                "required": ["city", "days"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"const": "UTC"}}, "required": ["zone"]}}}


def param_of(payload: dict[str, Any]) -> tuple[str | None, str]:
    """The 400 of a chat body with payload's tool fields: its shape (api.openai.generation_bodies), then read_tools."""
    with pytest.raises(InvalidInput) as raised:
        read({"model": "m", "messages": [{"role": "user", "content": "hi"}], **payload}, chat=True)
    return getattr(raised.value, "param", None), raised.value.message


def test_tools_are_read_with_their_choice_and_parallelism() -> None:
    tools = read_tools({"tools": [WEATHER, TIME]})
    assert tools is not None and tools.names == ["get_weather", "get_time"] and tools.choice == "auto"
    assert tools.parallel and not tools.forced
    named = read_tools({"tools": [WEATHER, TIME], "tool_choice": {"type": "function", "function": {"name": "get_time"}},
                        "parallel_tool_calls": False})
    assert named is not None and named.choice == "get_time" and named.forced and not named.parallel
    assert read_tools({"tools": [WEATHER], "tool_choice": "none"}) is None  # nothing rendered, nothing read
    assert read_tools({"tools": [], "tool_choice": "auto"}) is None  # OpenAI's no-op values
    bare = read_tools({"tools": [{"type": "function", "function": {"name": "ping"}}]})
    assert bare is not None and bare.tools[0]["function"]["parameters"] == {"type": "object", "properties": {}}


@pytest.mark.parametrize(("payload", "field", "words"), [
    ({"tools": {"name": "x"}}, "tools", "must be a list"),
    ({"tools": [{"type": "retrieval"}]}, "tools", "only functions"),
    ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools", "1-64 letters"),
    ({"tools": [WEATHER, WEATHER]}, "tools", "declared twice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "object"}}]}, "tools", "JSON Schema"),
    ({"tools": [{"type": "function", "function": {"name": "f", "extra": 1}}]}, "tools", "function.extra"),
    ({"tools": [WEATHER], "tool_choice": "always"}, "tool_choice", "must be"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice",
     "not one of the tools"),
    ({"tool_choice": "required"}, "tool_choice", "needs 'tools'"),
    ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls", "true or false"),
])
def test_bad_values_are_400s_naming_the_field(payload: dict[str, Any], field: str, words: str) -> None:
    param, message = param_of(payload)
    assert param == field and words in message


def test_huge_or_deep_parameter_schemas_are_fast_400s_naming_the_tool() -> None:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(MAX_DEPTH + 2):
        deep = {"type": "object", "properties": {"x": deep}}
    param, message = param_of({"tools": [{"type": "function", "function": {"name": "f", "parameters": deep}}]})
    assert param == "tools[0].function.parameters" and "levels deep" in message
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(2_000)}}
    param, message = param_of({"tools": [WEATHER, {"type": "function", "function": {"name": "f", "parameters": wide}}]})
    assert param == "tools[1].function.parameters" and "properties" in message


def test_tool_turns_reach_the_template_as_transformers_takes_them() -> None:
    assistant = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}
    assert tool_turn(assistant, 1) == {"tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}
    assert tool_turn({"role": "tool", "content": "21 C", "tool_call_id": "call_1"}, 2) == {"tool_call_id": "call_1"}
    named = with_result_names([{"role": "assistant", "content": "", **tool_turn(assistant, 1)},
                               {"role": "tool", "content": "21 C", "tool_call_id": "call_1"}])
    assert named[1]["name"] == "get_weather"  # from the call it answers, for templates that read a result's name
    with pytest.raises(InvalidInput, match="tool_call_id"):
        tool_turn({"role": "tool", "content": "21 C"}, 2)
    with pytest.raises(InvalidInput, match="JSON object as text"):
        tool_turn({**assistant, "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}, 1)


class ByteTokens:
    """A vocabulary of the 256 bytes and an end of sequence, as llguidance's TokenizerWrapper reads one."""

    tokens = [bytes([b]) for b in range(256)] + [b"<eos>"]
    eos_token_id, bos_token_id, special_token_ids = EOS, None, [EOS]

    def __call__(self, text: bytes | str) -> list[int]:
        return list(text.encode() if isinstance(text, str) else text)


def _written(grammar: str) -> str:
    """What a byte-level matcher of grammar writes, closing objects as soon as it may, else as the probe does."""
    vocabulary = llguidance.LLTokenizer(llguidance.TokenizerWrapper(ByteTokens()), n_vocab=EOS + 1, eos_token=EOS)
    matcher = llguidance.LLMatcher(vocabulary, grammar, log_level=0, limits=quiet_limits())
    written = bytearray()
    for _ in range(400):
        allowed = int.from_bytes(matcher.compute_bitmask(), "little")
        assert not matcher.is_error(), matcher.get_error()
        byte = next((b for b in b"}]" + PREFERRED if allowed >> b & 1), None)  # close first: an end
        if byte is None:
            bytes_allowed = allowed & ((1 << EOS) - 1)
            if not bytes_allowed:
                return written.decode()
            byte = (bytes_allowed & -bytes_allowed).bit_length() - 1
        matcher.consume_token(byte)
        written.append(byte)
    raise AssertionError(f"no end after {written.decode()!r}")


@pytest.mark.parametrize("fmt", ["hermes", "mistral", "llama3-json"])
@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_time"}}])
def test_a_forced_calls_grammar_writes_a_call_the_parser_reads(fmt: str, choice: Any) -> None:
    tools = read_tools({"tools": [WEATHER, TIME], "tool_choice": choice, "parallel_tool_calls": False})
    assert tools is not None
    grammar = tool_grammar.compile_source(tool_grammar.grammar_source(tools, fmt))  # type: ignore[arg-type]
    text = _written(grammar)
    parsed = parse(text, fmt)  # type: ignore[arg-type]
    assert len(parsed.calls) == 1 and parsed.content is None, text
    forced = parse(text, fmt, forced=True)  # type: ignore[arg-type]  # as the route reads it: the model's text
    assert forced.content is None and [(c.name, json.loads(c.arguments)) for c in forced.calls] == [
        (c.name, json.loads(c.arguments)) for c in parsed.calls]
    name, arguments = parsed.calls[0].name, json.loads(parsed.calls[0].arguments)
    if choice != "required":
        assert (name, arguments) == ("get_time", {"zone": "UTC"})
    else:
        assert name in tools.names and set(arguments) == ({"city", "days"} if name == "get_weather" else {"zone"})


# pydantic's shape: $defs at the parameters' root, and a $ref to the root itself.
PYDANTIC = {"type": "function", "function": {"name": "plan", "parameters": {
    "$defs": {"City": {"type": "object", "properties": {"name": {"const": "Rome"}}, "required": ["name"]}},
    "type": "object", "properties": {"city": {"$ref": "#/$defs/City"}, "next": {"anyOf": [{"type": "null"},
                                                                                          {"$ref": "#"}]}},
    "required": ["city"]}}}


@pytest.mark.parametrize("fmt", ["hermes", "mistral", "llama3-json"])
@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "plan"}}])
def test_a_forced_call_of_parameters_with_local_refs_compiles_where_they_now_sit(fmt: str, choice: Any) -> None:
    tools = read_tools({"tools": [TIME, PYDANTIC], "tool_choice": choice, "parallel_tool_calls": False})
    assert tools is not None
    text = _written(tool_grammar.compile_source(tool_grammar.grammar_source(tools, fmt)))  # type: ignore[arg-type]
    [call] = parse(text, fmt, forced=True).calls  # type: ignore[arg-type]
    if call.name == "plan":
        assert json.loads(call.arguments)["city"] == {"name": "Rome"}
