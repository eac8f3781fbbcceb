"""api.openai.responses_requests and responses_shapes: a Responses body as a chat request, and a chat answer as a
Response object and its typed events, parsed by the unchanged openai SDK's types."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from models_registry.api.openai import responses_requests
from models_registry.api.openai.responses_shapes import ResponseEvents
from models_registry.api.openai.tool_calls import ToolCall
from models_registry.core.errors import InvalidInput

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
EVENTS = TypeAdapter(ResponseStreamEvent)


def param_of(body: dict[str, Any]) -> str | None:
    with pytest.raises(InvalidInput) as raised:
        responses_requests.read(body)
    return getattr(raised.value, "param", None)


def test_a_string_input_with_instructions_is_a_system_then_a_user_message() -> None:
    read = responses_requests.read({"model": "m", "input": "Hi", "instructions": "Be brief.",
                                    "max_output_tokens": 7, "temperature": 0})
    assert read.chat.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert read.chat.parameters == {"max_new_tokens": 7, "do_sample": False}
    assert read.store and read.previous_id is None and not read.chat.stream
    assert read.echo["instructions"] == "Be brief." and read.echo["max_output_tokens"] == 7


def test_items_with_parts_calls_and_outputs_become_chat_turns() -> None:
    read = responses_requests.read({"model": "m", "tools": [WEATHER], "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Weather "}, {"type": "input_text",
                                                                                 "text": "in Paris?"}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]})
    user, assistant, tool = read.chat.messages or []
    assert user == {"role": "user", "content": "Weather in Paris?"}
    assert assistant["role"] == "assistant" and assistant["tool_calls"] == [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}, "id": "call_1"}]
    assert tool == {"role": "tool", "content": "sunny", "tool_call_id": "call_1", "name": "get_weather"}
    assert read.chat.tools is not None and read.chat.tools.names == ["get_weather"]


def test_flat_tools_and_a_named_tool_choice_become_chat_tools() -> None:
    payload = responses_requests.chat_payload(
        {"model": "m", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "get_weather"}}, [])
    assert payload["tools"] == [{"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}]
    assert payload["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    read = responses_requests.read({"model": "m", "input": "x", "tools": [WEATHER], "tool_choice": "required"})
    assert read.chat.tools is not None and read.chat.tools.forced


def test_text_format_becomes_a_response_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    read = responses_requests.read({"model": "m", "input": "x", "text": {"format": {
        "type": "json_schema", "name": "thing", "schema": schema, "strict": True}}})
    assert read.chat.schema is not None and json.loads(read.chat.schema)["required"] == ["a"]
    assert responses_requests.read({"model": "m", "input": "x", "text": {"format": {"type": "json_object"}}}
                                   ).chat.schema is not None
    assert responses_requests.read({"model": "m", "input": "x", "text": {"format": {"type": "text"}}}
                                   ).chat.schema is None


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "m"}, "input"),
    ({"model": "m", "input": []}, "input"),
    ({"model": "m", "input": [{"type": "image", "url": "x"}]}, "input"),
    ({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image"}]}]}, "input"),
    ({"model": "m", "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"model": "m", "input": "x", "temperature": 9}, "temperature"),
    ({"model": "m", "input": "x", "text": {"format": {"type": "json_schema"}}}, "text.format"),
    ({"model": "m", "input": "x", "tools": [{"type": "web_search"}]}, "tools"),
    ({"model": "m", "input": "x", "n": 2}, "n"),
    ({"model": "m", "input": "x", "store": "yes"}, "store"),
    ({"input": "x"}, "model"),
    ({"model": "m", "input": "x", "text": {"formats": {}}}, "text"),
    ({"model": "m", "input": [{"type": "function_call", "call_id": "", "name": "f", "arguments": ""}]}, "input"),
    ({"model": "m", "input": "x", "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
])
def test_a_bad_body_is_a_400_naming_the_responses_field(body: dict[str, Any], param: str) -> None:
    assert param_of(body) == param


def test_an_item_is_named_by_its_path_and_an_echoed_one_keeps_its_extra_keys() -> None:
    with pytest.raises(InvalidInput, match=r"input\[1\] must be .*input\[1\]\.content\[0\]\.type"):
        responses_requests.read({"model": "m", "input": [{"role": "user", "content": "a"},
                                                         {"role": "user", "content": [{"type": "input_image"}]}]})
    handed_back = {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed", "extra": 1,
                   "content": [{"type": "output_text", "text": "Hi", "annotations": [], "logprobs": []}]}
    assert responses_requests.read({"model": "m", "input": [handed_back]}).chat.messages == [
        {"role": "assistant", "content": "Hi"}]


def test_history_goes_after_the_new_instructions_and_before_the_input() -> None:
    first = [{"type": "message", "role": "user", "content": "Hi"}]
    answered = responses_requests.output_history([
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "hm"}]},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Hello!", "annotations": []}]}])
    assert answered == [{"type": "message", "role": "assistant", "content": "Hello!"}]
    read = responses_requests.read({"model": "m", "input": "And then?", "instructions": "Be brief.",
                                    "previous_response_id": "resp_1"})
    read = responses_requests.with_history(read, first + answered)
    assert [m["content"] for m in read.chat.messages or []] == ["Be brief.", "Hi", "Hello!", "And then?"]
    assert read.previous_id == "resp_1"


def test_a_whole_answer_is_a_response_the_sdk_reads() -> None:
    built = ResponseEvents(model="m", echo=responses_requests.echo({"model": "m", "input": "x"}))
    built.started()
    built.reasoning("thinking")
    built.text("Hello")
    built.text(" there")
    final = built.finished(5, 3, 0, truncated=False)[-1]["response"]
    parsed = Response.model_validate(final)
    assert parsed.output_text == "Hello there" and parsed.status == "completed"
    assert [item.type for item in parsed.output] == ["reasoning", "message"]
    assert parsed.id.startswith("resp_") and parsed.output[1].id.startswith("msg_")
    assert parsed.usage is not None and (parsed.usage.input_tokens, parsed.usage.total_tokens) == (5, 8)


def test_a_cut_answer_is_incomplete() -> None:
    built = ResponseEvents(model="m", echo=responses_requests.echo({"model": "m", "input": "x"}))
    built.text("Hel")
    final = Response.model_validate(built.finished(2, 16, 0, truncated=True)[-1]["response"])
    assert final.status == "incomplete" and final.incomplete_details is not None
    assert final.incomplete_details.reason == "max_output_tokens"


def test_the_event_sequence_parses_numbers_in_order_and_the_deltas_join_to_the_text() -> None:
    built = ResponseEvents(model="m", echo=responses_requests.echo({"model": "m", "input": "x"}))
    events = built.started() + built.text("Hel") + built.text("lo") + built.call(
        ToolCall("get_weather", '{"city":"Paris"}')) + built.finished(4, 9, 0, truncated=False)
    parsed = [EVENTS.validate_python(e) for e in events]
    assert [e.sequence_number for e in parsed] == list(range(len(parsed)))
    assert [e.type for e in parsed] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.output_item.added",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed"]
    assert "".join(e.delta for e in parsed if e.type == "response.output_text.delta") == "Hello"
    final = parsed[-1].response  # type: ignore[union-attr]
    call = final.output[1]
    assert call.type == "function_call" and json.loads(call.arguments) == {"city": "Paris"}
    assert call.call_id.startswith("call_") and final.output_text == "Hello"


def test_an_empty_answer_is_still_one_message() -> None:
    built = ResponseEvents(model="m", echo=responses_requests.echo({"model": "m", "input": "x"}))
    final = Response.model_validate(built.finished(2, 0, 0, truncated=False)[-1]["response"])
    assert final.output_text == "" and [item.type for item in final.output] == ["message"]


def test_a_previous_output_handed_back_as_input_is_read_without_its_reasoning() -> None:
    output = [{"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "hm"}]},
              {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
              {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
               "arguments": '{"city": "Paris"}', "status": "completed"}]
    read = responses_requests.read({"model": "m", "tools": [WEATHER], "input": [
        {"role": "user", "content": "Weather?"}, *output,
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]})
    _, assistant, tool = read.chat.messages or []
    assert assistant["content"] == "Let me look." and assistant["tool_calls"][0]["id"] == "call_1"
    assert tool["tool_call_id"] == "call_1" and "hm" not in json.dumps(read.chat.messages)
