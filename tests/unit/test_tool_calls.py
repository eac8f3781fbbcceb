"""api.openai.tool_calls: each family's calls told from the text, whole and fed piece by piece."""

from __future__ import annotations

import json

import pytest

from models_registry.api.openai.tool_calls import ToolCallStream, parse
from models_registry.core import token_events

# Outputs as the families write them (the shapes of vLLM's tool parser tests).
HERMES_ONE = '<tool_call>\n{"name": "get_current_weather", "arguments": {"city": "Dallas", "state": "TX", ' \
             '"unit": "fahrenheit"}}\n</tool_call>'
HERMES_TWO = ('I will look both up.\n<tool_call>\n{"name": "get_current_weather", "arguments": {"city": "Dallas"}}\n'
              '</tool_call>\n<tool_call>\n{"name": "get_current_weather", "arguments": {"city": "Orlando"}}\n'
              '</tool_call>')
MISTRAL = ('[TOOL_CALLS][{"name": "get_current_weather", "arguments": {"city": "San Francisco", "state": "CA", '
           '"unit": "celsius"}}, {"name": "add", "arguments": {"a": 3.5, "b": 4}}]')
LLAMA3 = '<|python_tag|>{"name": "searchTool", "parameters": {"query": "test query", "limit": 10}}'
LLAMA3_MANY = ('{"name": "searchTool", "parameters": {"query": "test1"}}; '
               '{"name": "getOpenIncidentsTool", "parameters": {}}')


def calls(text: str, fmt: str, parallel: bool = True) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in parse(text, fmt, parallel).calls]  # type: ignore[arg-type]


def test_hermes_one_call_is_the_whole_answer() -> None:
    parsed = parse(HERMES_ONE, "hermes")
    assert parsed.content is None
    assert calls(HERMES_ONE, "hermes") == [("get_current_weather", {"city": "Dallas", "state": "TX",
                                                                    "unit": "fahrenheit"})]
    call = parsed.calls[0]
    assert call.id.startswith("call_") and len(call.id) == 29
    assert call.shaped()["type"] == "function" and isinstance(call.shaped()["function"]["arguments"], str)


def test_hermes_several_calls_and_the_text_before_them() -> None:
    parsed = parse(HERMES_TWO, "hermes")
    assert parsed.content == "I will look both up."
    assert [args["city"] for _, args in calls(HERMES_TWO, "hermes")] == ["Dallas", "Orlando"]
    assert len({c.id for c in parsed.calls}) == 2


def test_parallel_false_keeps_the_first_call() -> None:
    assert [args["city"] for _, args in calls(HERMES_TWO, "hermes", parallel=False)] == ["Dallas"]


def test_mistral_calls_after_the_marker_and_without_it() -> None:
    assert calls(MISTRAL, "mistral") == [
        ("get_current_weather", {"city": "San Francisco", "state": "CA", "unit": "celsius"}),
        ("add", {"a": 3.5, "b": 4})]
    # [TOOL_CALLS] is a special token the worker's text leaves out: the bare list is read the same
    assert calls(MISTRAL.removeprefix("[TOOL_CALLS]"), "mistral") == calls(MISTRAL, "mistral")
    assert parse("Sure. " + MISTRAL, "mistral").content == "Sure."
    assert all(len(c.id) == 9 and c.id.isalnum() for c in parse(MISTRAL, "mistral").calls)  # Mistral's templates


def test_llama3_json_with_and_without_the_python_tag() -> None:
    assert calls(LLAMA3, "llama3-json") == [("searchTool", {"query": "test query", "limit": 10})]
    assert calls(LLAMA3.removeprefix("<|python_tag|>"), "llama3-json") == calls(LLAMA3, "llama3-json")
    assert [name for name, _ in calls(LLAMA3_MANY, "llama3-json")] == ["searchTool", "getOpenIncidentsTool"]
    assert parse(LLAMA3_MANY, "llama3-json").content is None


@pytest.mark.parametrize(("text", "fmt"), [
    ('<tool_call>\n{"name": "f", "arguments": {oops}}\n</tool_call>', "hermes"),
    ('<tool_call>\n{"arguments": {}}\n</tool_call>', "hermes"),  # no name
    ('<tool_call>\n{"name": "f", "arguments": {"a": 1}}', "hermes"),  # never closed (cut at max_tokens)
    ('[TOOL_CALLS][{"name": "f", "arguments": {"a": 1}', "mistral"),
    ('{"name": "invalidTool", "parameters": {invalid json}', "llama3-json"),
    ('{"not": "a call"}', "llama3-json"),
    ('Sure.\n<tool_call>\n{"name": "f", "arguments": [1]}\n</tool_call> done', "hermes"),  # arguments not an object
    ("I think [TOOL_CALLS] means nothing here", "mistral"),
])
def test_malformed_calls_are_content_as_written(text: str, fmt: str) -> None:
    parsed = parse(text, fmt)  # type: ignore[arg-type]
    assert parsed.calls == [] and parsed.content == text


def test_plain_text_is_content_and_none_reads_nothing() -> None:
    assert parse("This is just some text", "llama3-json").content == "This is just some text"
    assert parse("a < b and [x]", "hermes").content == "a < b and [x]"
    assert parse(HERMES_ONE, "none").content == HERMES_ONE and parse(HERMES_ONE, "none").calls == []


@pytest.mark.parametrize(("text", "fmt"), [(HERMES_TWO, "hermes"), (MISTRAL, "mistral"), (LLAMA3, "llama3-json"),
                                           ("Just text <tool but no call.", "hermes"),
                                           ("Sure.\n<tool_call>{bad}</tool_call>\n" + HERMES_ONE, "hermes")])
@pytest.mark.parametrize("size", [1, 2, 5, 1000])
def test_fed_in_pieces_it_releases_what_the_whole_answer_holds(text: str, fmt: str, size: int) -> None:
    whole = parse(text, fmt)  # type: ignore[arg-type]
    stream = ToolCallStream(fmt)  # type: ignore[arg-type]
    content, made = "", []
    for at in range(0, len(text), size):
        found = stream.feed(text[at:at + size])
        content += found.content
        made += found.calls
        assert "<tool" not in found.content or "<tool" in (whole.content or "")  # a marker leaks as no call only
    found = stream.finish()
    content, made = content + found.content, made + list(found.calls)
    assert [(c.name, c.arguments) for c in made] == [(c.name, c.arguments) for c in whole.calls]
    assert (content if content.strip() or not made else None) == whole.content


def test_a_marker_prefix_is_held_until_the_next_piece_tells() -> None:
    stream = ToolCallStream("hermes")
    assert stream.feed("Hello <tool").content == "Hello"
    assert stream.feed("box>").content == " <toolbox>"  # not a marker after all


def test_the_deltas_open_a_call_then_carry_its_arguments() -> None:
    call = parse(HERMES_ONE, "hermes").calls[0]
    opening, arguments = call.deltas(1)
    assert opening == {"index": 1, "id": call.id, "type": "function",
                       "function": {"name": "get_current_weather", "arguments": ""}}
    assert arguments == {"index": 1, "function": {"arguments": call.arguments}}


def _event(text: str, last: bool = False) -> dict:
    token = {"id": 1, "text": text, "logprob": 0.0, "special": False}
    if not last:
        return token_events.token_event(token)
    summary = token_events.Summary(finish_reason="eos_token", generated_tokens=9, seed=None, input_length=3)
    return token_events.last_event(token, summary, "", "")  # the text is the pieces


def test_a_call_inside_the_reasoning_is_not_read_and_one_after_it_is() -> None:
    from models_registry.api.openai.completion_shapes import Choice, Shaper
    from models_registry.api.openai.reasoning_split import ReasoningSplitter

    pieces = ["<think>I could write <tool_", 'call>{"name": "x", "arguments": {}}</tool_call></think>',
              "\n<tool_call>\n", '{"name": "get_weather", "arguments": {"city": "Rome"}}', "\n</tool_call>"]
    choice = Choice(index=0, stops=[], splitter=ReasoningSplitter("think"), caller=ToolCallStream("hermes"))
    deltas: list = []
    for n, piece in enumerate(pieces):
        choice.take(_event(piece, last=n == len(pieces) - 1))
        deltas += choice.new_calls()
    assert '<tool_call>{"name": "x"' in choice.reasoning and choice.finish_reason == "tool_calls"
    message = Shaper(chat=True, model="m", n=1).answer([choice])["choices"][0]
    assert message["finish_reason"] == "tool_calls" and message["message"]["content"] is None
    [call] = message["message"]["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Rome"}'}
    assert [d.get("id") for d in deltas] == [call["id"], None]
    assert deltas[1]["function"]["arguments"] == '{"city": "Rome"}'


# A forced call's text, as its grammar writes it (api.openai.tool_grammar: compact JSON).
FORCED = {"hermes": '<tool_call>\n{"name":"get_weather","arguments":{"city":"Rome {x}","q":"\\"}"}}\n</tool_call>\n'
                    '<tool_call>\n{"name":"add","arguments":{"a":[1,{"b":2}]}}\n</tool_call>',
          "mistral": '[TOOL_CALLS][{"name":"get_weather","arguments":{"city":"Rome"}},{"name":"add","arguments":{}}]',
          "llama3-json": '{"name":"get_weather","parameters":{"city":"Rome"}}; {"name":"add","parameters":{"a":1}}'}

ARGUMENTS = {"hermes": ['{"city":"Rome {x}","q":"\\"}"}', '{"a":[1,{"b":2}]}'],
             "mistral": ['{"city":"Rome"}', "{}"], "llama3-json": ['{"city":"Rome"}', '{"a":1}']}


def _streamed(text: str, fmt: str, size: int, parallel: bool = True) -> tuple[str, list, list[dict]]:
    """(content, calls, deltas) of a forced answer fed size characters at a time."""
    stream = ToolCallStream(fmt, parallel, forced=True)  # type: ignore[arg-type]
    found = [stream.feed(text[at:at + size]) for at in range(0, len(text), size)] + [stream.finish()]
    return ("".join(f.content for f in found), [c for f in found for c in f.calls],
            [d for f in found for d in f.deltas])


@pytest.mark.parametrize("fmt", list(FORCED))
@pytest.mark.parametrize("size", [1, 2, 3, 5, 1000])
def test_a_forced_answer_streams_its_arguments_as_they_come_and_they_join_to_the_whole_call(fmt: str,
                                                                                           size: int) -> None:
    text = FORCED[fmt]
    whole = parse(text, fmt, forced=True)  # type: ignore[arg-type]
    content, made, deltas = _streamed(text, fmt, size)
    assert whole.content is None and content == ""
    assert [c.name for c in made] == [c.name for c in whole.calls] == ["get_weather", "add"]
    for index, call in enumerate(made):
        mine = [d for d in deltas if d["index"] == index]
        assert mine[0] == {"index": index, "id": call.id, "type": "function",
                           "function": {"name": call.name, "arguments": ""}}
        assert all(set(d) == {"index", "function"} and set(d["function"]) == {"arguments"} for d in mine[1:])
        assert "".join(d["function"]["arguments"] for d in mine[1:]) == call.arguments == whole.calls[index].arguments
        assert call.arguments == ARGUMENTS[fmt][index]  # exactly as the model wrote them
        if size == 1 and call.arguments != "{}":
            assert len(mine) > 2  # the arguments came in more than one piece


def test_a_forced_call_cut_short_is_what_it_released() -> None:
    content, [call], deltas = _streamed('<tool_call>\n{"name":"f","arguments":{"a":"ab', "hermes", 4)
    assert (content, call.name, call.arguments) == ("", "f", '{"a":"ab')
    assert "".join(d["function"]["arguments"] for d in deltas) == call.arguments
    assert parse('<tool_call>\n{"name":"f","arguments":{"a":"ab', "hermes", forced=True).calls[0].arguments == '{"a":"ab'
    assert _streamed('<tool_call>\n{"name":"f', "hermes", 3) == ("", [], [])  # cut before its name: no call, no text
    assert parse('[TOOL_CALLS][{"name":', "mistral", forced=True) == parse("", "mistral")


def test_a_forced_answer_keeps_one_call_without_parallel_and_text_outside_the_grammar_as_content() -> None:
    content, made, deltas = _streamed(FORCED["hermes"], "hermes", 3, parallel=False)
    assert [c.name for c in made] == ["get_weather"] and {d["index"] for d in deltas} == {0}
    content, made, _ = _streamed('Let me check.\n<tool_call>\n{"arguments": {}, "name": "f"}\n</tool_call>', "hermes", 2)
    assert content == "Let me check." and [(c.name, c.arguments) for c in made] == [("f", "{}")]


def test_a_forced_mistral_call_has_a_mistral_id() -> None:
    _, made, _ = _streamed(FORCED["mistral"], "mistral", 7)
    assert all(len(c.id) == 9 for c in made)
