"""The Responses API on the real stack through the unchanged openai SDK: a tiny GPT-2 whose Hermes-style template
takes tools; plain, streamed, continued with previous_response_id, a forced call, and stored per token."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests import model_factory
from tests.stack import Stack, http_json

pytestmark = pytest.mark.integration

MODEL = "tools-gpt2"
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.", "strict": True,
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
                          "required": ["city"]}}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The tiny chat model that takes tools, two tokens, one worker."""
    source = model_factory.build_tiny_gpt2(tmp_path_factory.mktemp("responses") / "model", positions=1024,
                                           chat_template=model_factory.TOOLS_TEMPLATE)
    with Stack.started() as running:
        running.manage("register_model", MODEL, "--source", str(source), "--task", "text-generation")
        running.create_token("all")  # wait_ready reads /models with it
        running.create_token("theirs")
        running.start_worker()
        running.start_web()
        running.wait_ready([MODEL])
        yield running


def client_of(stack: Stack, token: str) -> Any:
    """The openai SDK pointed at the stack as token."""
    from openai import OpenAI

    return OpenAI(base_url=f"{stack.url}/v1", api_key=stack.tokens[token], max_retries=0, timeout=60)


def test_plain_streamed_continued_and_stored(stack: Stack) -> None:
    client = client_of(stack, "all")
    first = client.responses.create(model=MODEL, input="Hello there", instructions="Be brief.",
                                    max_output_tokens=12, temperature=0)
    assert first.object == "response" and first.id.startswith("resp_") and first.status in ("completed", "incomplete")
    assert first.output[0].type == "message" and isinstance(first.output_text, str) and first.output_text
    assert first.usage.output_tokens > 0 and first.instructions == "Be brief."

    events = list(client.responses.create(model=MODEL, input="Hello there", instructions="Be brief.",
                                          max_output_tokens=12, temperature=0, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == events[-1].response.output_text == first.output_text  # greedy: the same text

    second = client.responses.create(model=MODEL, input="And then?", previous_response_id=first.id,
                                     max_output_tokens=4, temperature=0)
    assert second.previous_response_id == first.id
    alone = client.responses.create(model=MODEL, input="And then?", max_output_tokens=4, temperature=0, store=False)
    # the first turn and its answer come before the new input (the answer re-tokenized may merge a few tokens)
    assert second.usage.input_tokens >= alone.usage.input_tokens + first.usage.output_tokens - 2
    assert second.usage.input_tokens > first.usage.input_tokens

    assert client.responses.retrieve(first.id).output_text == first.output_text
    status, _, body = http_json("GET", f"{stack.url}/v1/responses/{first.id}", token=stack.tokens["theirs"])
    assert status == 404 and body["error"]["code"] == "not_found"
    status, _, _ = http_json("GET", f"{stack.url}/v1/responses/{alone.id}", token=stack.tokens["all"])
    assert status == 404  # store=False
    client.responses.delete(first.id)
    status, _, _ = http_json("GET", f"{stack.url}/v1/responses/{first.id}", token=stack.tokens["all"])
    assert status == 404


def test_a_required_tool_is_a_function_call_item(stack: Stack) -> None:
    import jsonschema

    client = client_of(stack, "all")
    answer = client.responses.create(model=MODEL, input="The weather in Paris?", tools=[WEATHER],
                                     tool_choice="required", parallel_tool_calls=False, max_output_tokens=200,
                                     temperature=0)
    calls = [item for item in answer.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].call_id.startswith("call_")
    jsonschema.validate(json.loads(calls[0].arguments), {**WEATHER["parameters"], "additionalProperties": False})
    answered = client.responses.create(model=MODEL, previous_response_id=answer.id, tools=[WEATHER],
                                       max_output_tokens=4, temperature=0, input=[
                                           {"type": "function_call_output", "call_id": calls[0].call_id,
                                            "output": "sunny"}])
    assert answered.usage.input_tokens > answer.usage.input_tokens
