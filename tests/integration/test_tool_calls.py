"""Tool calls on the real stack through the openai SDK: a tiny GPT-2 whose Hermes-style template takes tools."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import model_factory
from tests.stack import Stack, http_json

pytestmark = pytest.mark.integration

TOOLS, CHAT = "tools-gpt2", "chat-gpt2"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city, for some days.", "strict": True,
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]},
                                                   "days": {"type": "integer", "minimum": 1, "maximum": 3}},
                   "required": ["city", "days"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The time now.", "strict": True,
                                         "parameters": {"type": "object", "properties": {"zone": {"const": "UTC"}},
                                                        "required": ["zone"]}}}
SCHEMAS = {t["function"]["name"]: {**t["function"]["parameters"], "additionalProperties": False}
           for t in (WEATHER, TIME)}
ASK = [{"role": "user", "content": "The weather in Paris, and the time?"}]


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same tiny GPT-2 twice: with a template that takes tools, and with the plain one."""
    root = tmp_path_factory.mktemp("tool-calls")
    return {TOOLS: model_factory.build_tiny_gpt2(root / "tools", positions=1024,
                                                 chat_template=model_factory.TOOLS_TEMPLATE),
            CHAT: model_factory.build_tiny_gpt2(root / "chat", positions=1024,
                                                chat_template=model_factory.CHAT_TEMPLATE)}


@pytest.fixture(scope="module")
def stack(tiny_models: dict[str, Path]) -> Iterator[Stack]:
    """Both models on a stack of their own, one worker."""
    with Stack.started() as running:
        for name, source in tiny_models.items():
            running.manage("register_model", name, "--source", str(source), "--task", "text-generation")
        running.create_token("all")
        running.start_worker()
        running.start_web()
        running.wait_ready([TOOLS, CHAT])
        yield running


@pytest.fixture(scope="module")
def client(stack: Stack) -> Any:
    """The openai SDK pointed at the stack."""
    from openai import OpenAI

    return OpenAI(base_url=f"{stack.url}/v1", api_key=stack.tokens["all"], max_retries=0, timeout=60)


def valid_call(call: Any) -> tuple[str, dict[str, Any]]:
    """A call's name and arguments, checked against its function's schema."""
    import jsonschema

    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, SCHEMAS[call.function.name])
    assert call.type == "function" and call.id.startswith("call_")
    return call.function.name, arguments


def joined(chunks: list[Any]) -> list[dict[str, Any]]:
    """The calls a stream's deltas make, joined by index as an SDK user joins them."""
    calls: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            call = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
            if delta.id:
                assert call["id"] is None and delta.type == "function"  # the first delta of a call opens it
                call["id"] = delta.id
            call["name"] += delta.function.name or ""
            call["arguments"] += delta.function.arguments or ""
    return [calls[i] for i in sorted(calls)]


def test_required_forces_a_valid_call_whole_and_streamed(client: Any) -> None:
    options = {"model": TOOLS, "messages": ASK, "tools": [WEATHER, TIME], "tool_choice": "required",
               "parallel_tool_calls": False, "max_tokens": 200, "temperature": 1.0, "seed": 3}
    answer = client.chat.completions.create(**options)
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert len(choice.message.tool_calls) == 1
    name, arguments = valid_call(choice.message.tool_calls[0])
    assert answer.usage.completion_tokens > 5
    chunks = list(client.chat.completions.create(**options, stream=True, stream_options={"include_usage": True}))
    [streamed] = joined(chunks)
    assert (streamed["name"], json.loads(streamed["arguments"])) == (name, arguments)
    assert streamed["arguments"] == choice.message.tool_calls[0].function.arguments
    pieces = [d.function.arguments for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []
              if d.function.arguments]
    assert len(pieces) > 1  # the arguments came as they were generated, not at once
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ""
    assert chunks[-1].usage.completion_tokens == answer.usage.completion_tokens
    named = client.chat.completions.create(**{**options, "tool_choice": {"type": "function",
                                                                         "function": {"name": "get_time"}}})
    assert valid_call(named.choices[0].message.tool_calls[0]) == ("get_time", {"zone": "UTC"})


def test_a_three_turn_conversation_with_two_tools(client: Any, tiny_models: dict[str, Path]) -> None:
    """A call, its result as a tool turn, and the next answer; the tool turn reaches the template (its tokens)."""
    from transformers import AutoTokenizer

    tools = [WEATHER, TIME]
    first = client.chat.completions.create(model=TOOLS, messages=ASK, tools=tools, tool_choice="required",
                                           max_tokens=200, temperature=0, parallel_tool_calls=False)
    call = first.choices[0].message.tool_calls[0]
    valid_call(call)
    conversation = [*ASK, {"role": "assistant", "content": None, "tool_calls": [
        {"id": call.id, "type": "function", "function": {"name": call.function.name,
                                                         "arguments": call.function.arguments}}]},
                    {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 degrees"}]
    third = client.chat.completions.create(model=TOOLS, messages=conversation, tools=tools, max_tokens=8,
                                           temperature=0)
    assert third.choices[0].finish_reason in ("length", "stop", "tool_calls")
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_models[TOOLS]))
    rendered = tokenizer.apply_chat_template(
        [*ASK, {"role": "assistant", "content": "", "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": call.function.name,
                                                             "arguments": json.loads(call.function.arguments)}}]},
         {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 degrees"}],
        tools=tools,
        tokenize=False, add_generation_prompt=True)
    assert "tool (" + call.id + "): sunny, 21 degrees" in rendered
    assert third.usage.prompt_tokens == len(tokenizer(rendered)["input_ids"])
    # one call: with parallel calls allowed, random weights may go on calling until max_tokens (each id differs,
    # and so does this prompt, from run to run)
    again = client.chat.completions.create(model=TOOLS, messages=conversation, tools=tools, tool_choice="required",
                                           max_tokens=200, temperature=0, parallel_tool_calls=False)
    assert again.choices[0].finish_reason == "tool_calls" and len(again.choices[0].message.tool_calls) == 1
    valid_call(again.choices[0].message.tool_calls[0])


def test_a_template_without_tools_is_a_400(client: Any, stack: Stack) -> None:
    import openai

    for model, said in ((TOOLS, {"value": "hermes", "from": "files"}), (CHAT, {"value": "none", "from": "default"})):
        status, _, detail = http_json("GET", f"{stack.url}/models/{model}", token=stack.tokens["all"])
        assert status == 200 and detail["tasks"][0]["settings"]["tool_call_format"] == said

    with pytest.raises(openai.BadRequestError, match="does not render tools") as caught:
        client.chat.completions.create(model=CHAT, messages=ASK, tools=[WEATHER], max_tokens=4)
    assert caught.value.body["param"] == "tools"
    plain = client.chat.completions.create(model=CHAT, messages=ASK, tools=[WEATHER], tool_choice="none",
                                           max_tokens=4, temperature=0)
    assert plain.choices[0].message.tool_calls is None and plain.choices[0].finish_reason == "length"
