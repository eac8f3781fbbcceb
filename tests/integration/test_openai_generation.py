"""OpenAI chat and completions on the real stack, through the openai SDK and huggingface_hub."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import model_factory
from tests.stack import Stack, http_json

pytestmark = pytest.mark.integration

CHAT, PLAIN, CLS, THINK = "chat-gpt2", "plain-gpt2", "tiny-cls", "think-gpt2"


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny GPT-2 with a chat template (1,024 positions), one without, and a classifier.

    THINK is the chat GPT-2's very weights (the same seed and tokenizer) with a template that opens `<think>`.
    """
    root = tmp_path_factory.mktemp("openai-generation")
    return {CHAT: model_factory.build_tiny_gpt2(root / "chat", positions=1024,
                                                chat_template=model_factory.CHAT_TEMPLATE),
            THINK: model_factory.build_tiny_gpt2(root / "think", positions=1024,
                                                 chat_template=model_factory.THINK_TEMPLATE),
            PLAIN: model_factory.build_tiny_gpt2(root / "plain"),
            CLS: model_factory.build_sequence_classifier(root / "cls")}


@pytest.fixture(scope="module")
def stack(tiny_models: dict[str, Path]) -> Iterator[Stack]:
    """The generation models on a stack of their own, one worker."""
    with Stack.started() as running:
        running.manage("register_model", CHAT, "--source", str(tiny_models[CHAT]), "--task", "text-generation",
                       "--max-batch-size", "8", "--timeout", "60")
        running.manage("register_model", PLAIN, "--source", str(tiny_models[PLAIN]), "--task", "text-generation")
        running.manage("register_model", CLS, "--source", str(tiny_models[CLS]), "--task", "text-classification")
        running.manage("register_model", THINK, "--source", str(tiny_models[THINK]), "--task", "text-generation")
        running.create_token("all")
        running.start_worker()
        running.start_web()
        running.wait_ready([CHAT, PLAIN, CLS, THINK])
        yield running


@pytest.fixture(scope="module")
def client(stack: Stack) -> Any:
    """The openai SDK pointed at the stack."""
    from openai import OpenAI

    return OpenAI(base_url=f"{stack.url}/v1", api_key=stack.tokens["all"], max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def greedy(tiny_models: dict[str, Path]) -> Any:
    """The chat GPT-2's own greedy continuation of a prompt, in process."""
    from transformers import pipeline

    pipe = pipeline("text-generation", model=str(tiny_models[CHAT]))
    return lambda prompt, n: pipe(prompt, max_new_tokens=n, do_sample=False, return_full_text=False)[0][
        "generated_text"]


def chat_prompt(messages: list[dict[str, str]]) -> str:
    """What the chat template makes of messages (model_factory.CHAT_TEMPLATE)."""
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"


MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "The cat sees"}]


def test_models_lists_generation_ids(client: Any) -> None:
    ids = {m.id for m in client.models.list().data}
    assert {CHAT, PLAIN} <= ids and CLS not in ids


def test_chat_renders_the_template_and_counts_usage(client: Any, greedy: Any) -> None:
    answer = client.chat.completions.create(model=CHAT, messages=MESSAGES, max_tokens=12, temperature=0)
    choice = answer.choices[0]
    assert choice.message.role == "assistant" and choice.message.content == greedy(chat_prompt(MESSAGES), 12)
    assert choice.finish_reason == "length" and answer.object == "chat.completion" and answer.model == CHAT
    assert answer.usage.completion_tokens == 12 and answer.usage.prompt_tokens > 5
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + 12


def test_chat_streams_chunks_and_usage(client: Any, greedy: Any) -> None:
    chunks = list(client.chat.completions.create(model=CHAT, messages=MESSAGES, max_tokens=10, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == greedy(chat_prompt(MESSAGES), 10)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 10
    assert all(c.usage is None for c in chunks[:-1]) and len({c.id for c in chunks}) == 1


def test_a_template_that_opens_think_answers_reasoning_content(client: Any, stack: Stack, greedy: Any) -> None:
    expected = greedy(chat_prompt(MESSAGES) + " <think>\n", 12).strip()  # never closed in 12 random tokens
    assert expected and "</think>" not in expected
    answer = client.chat.completions.create(model=THINK, messages=MESSAGES, max_tokens=12, temperature=0)
    message = answer.choices[0].message
    assert (message.reasoning_content, message.content) == (expected, "")  # the SDK keeps the extra field
    assert answer.choices[0].finish_reason == "length" and answer.usage.completion_tokens == 12
    chunks = list(client.chat.completions.create(model=THINK, messages=MESSAGES, max_tokens=12, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == expected
    assert "".join(d.content or "" for d in deltas) == "" and chunks[-1].usage.completion_tokens == 12
    status, _, detail = http_json("GET", f"{stack.url}/models/{THINK}", token=stack.tokens["all"])
    assert status == 200
    assert detail["tasks"][0]["settings"]["reasoning_format"] == {"value": "think-open", "from": "files"}
    plain = client.chat.completions.create(model=CHAT, messages=MESSAGES, max_tokens=4, temperature=0)
    assert getattr(plain.choices[0].message, "reasoning_content", None) is None  # no <think> in its template


def test_completions_and_a_stop_sequence(client: Any, greedy: Any) -> None:
    expected = greedy("The cat sees", 20)
    answer = client.completions.create(model=CHAT, prompt="The cat sees", max_tokens=20, temperature=0)
    assert answer.choices[0].text == expected and answer.choices[0].finish_reason == "length"
    stop = expected[5:8]
    assert stop.strip(), expected
    cut = client.completions.create(model=CHAT, prompt="The cat sees", max_tokens=20, temperature=0, stop=[stop])
    assert cut.choices[0].text == expected[:expected.find(stop)] and cut.choices[0].finish_reason == "stop"
    streamed = list(client.completions.create(model=CHAT, prompt="The cat sees", max_tokens=20, temperature=0,
                                              stop=stop, stream=True))
    assert "".join(c.choices[0].text for c in streamed) == cut.choices[0].text
    assert streamed[-1].choices[0].finish_reason == "stop"


def test_n_choices_with_a_seed_are_reproducible(client: Any) -> None:
    def ask() -> list[str]:
        answer = client.chat.completions.create(model=CHAT, messages=MESSAGES, max_tokens=8, n=3, seed=7,
                                                temperature=1.0)
        assert [c.index for c in answer.choices] == [0, 1, 2] and answer.usage.completion_tokens == 24
        return [c.message.content for c in answer.choices]

    first = ask()
    assert ask() == first and len(set(first)) > 1  # seed + i per choice: they differ, and repeat


def test_openais_no_op_values_are_accepted(client: Any, greedy: Any) -> None:
    answer = client.chat.completions.create(
        model=CHAT, messages=MESSAGES, max_tokens=6, temperature=0, tools=[], tool_choice="none",
        parallel_tool_calls=False, logit_bias={}, response_format={"type": "text"}, presence_penalty=0,
        frequency_penalty=0, logprobs=False, modalities=["text"], store=False)
    assert answer.choices[0].message.content == greedy(chat_prompt(MESSAGES), 6)
    completion = client.completions.create(model=CHAT, prompt="The cat sees", max_tokens=6, temperature=0,
                                           echo=False, best_of=1, logit_bias={}, presence_penalty=0)
    assert completion.choices[0].text == greedy("The cat sees", 6)


def test_logprobs_whole_and_streamed(client: Any, greedy: Any) -> None:
    answer = client.chat.completions.create(model=CHAT, messages=MESSAGES, max_tokens=8, temperature=0,
                                            logprobs=True, top_logprobs=3)
    choice = answer.choices[0]
    content = choice.logprobs.content
    assert choice.message.content == greedy(chat_prompt(MESSAGES), 8) and len(content) == 8
    assert b"".join(bytes(c.bytes) for c in content) == choice.message.content.encode()
    for c in content:
        assert len(c.top_logprobs) == 3 and c.top_logprobs[0].token == c.token  # greedy: the most likely
        assert c.top_logprobs[0].logprob == c.logprob <= 0 and c.top_logprobs[1].logprob <= c.logprob
    chunks = list(client.chat.completions.create(model=CHAT, messages=MESSAGES, max_tokens=8, temperature=0,
                                                 logprobs=True, top_logprobs=3, stream=True))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [(e.token, round(e.logprob, 4)) for e in streamed] == [(e.token, round(e.logprob, 4)) for e in content]
    for c in chunks:  # each chunk carries the entries of the text it shows
        if c.choices and c.choices[0].delta.content:
            shown = c.choices[0].logprobs.content
            assert b"".join(bytes(e.bytes) for e in shown) == c.choices[0].delta.content.encode()

    completion = client.completions.create(model=CHAT, prompt="The cat sees", max_tokens=6, temperature=0,
                                           logprobs=2)
    logprobs = completion.choices[0].logprobs
    assert "".join(logprobs.tokens) == completion.choices[0].text == greedy("The cat sees", 6)
    assert logprobs.text_offset == [sum(len(t) for t in logprobs.tokens[:i]) for i in range(6)]
    assert all(len(top) in (2, 3) and top[token] == lp
               for top, token, lp in zip(logprobs.top_logprobs, logprobs.tokens, logprobs.token_logprobs))


PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 10}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "pets": {"type": "array", "items": {"enum": ["cat", "dog"]}, "maxItems": 2}, "human": {"type": "boolean"}},
    "required": ["name", "age", "pets", "human"]}


def test_structured_output_is_valid_json_even_from_random_weights(client: Any, greedy: Any) -> None:
    """Three json_schema rows and a free one at once (one batch): the schema's JSON, compact, ended by the grammar."""
    import jsonschema
    from concurrent.futures import ThreadPoolExecutor

    form = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}

    def structured(seed: int) -> Any:
        return client.chat.completions.create(model=CHAT, messages=MESSAGES, max_tokens=200, temperature=1.0,
                                              seed=seed, response_format=form)

    with ThreadPoolExecutor(4) as pool:
        free = pool.submit(client.completions.create, model=CHAT, prompt="The cat sees", max_tokens=30, temperature=0)
        answers = list(pool.map(structured, range(3)))
    assert free.result().choices[0].text == greedy("The cat sees", 30)
    for answer in answers:
        content = answer.choices[0].message.content
        jsonschema.validate(json.loads(content), {**PERSON, "additionalProperties": False})
        assert answer.choices[0].finish_reason == "stop" and "\n" not in content
    chunks = list(client.chat.completions.create(model=CHAT, messages=MESSAGES, max_tokens=200, temperature=1.0,
                                                 seed=0, response_format=form, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == answers[0].choices[0].message.content
    obj = client.completions.create(model=CHAT, prompt="{", max_tokens=60, temperature=0,
                                    extra_body={"response_format": {"type": "json_object"}}, logprobs=1)
    assert obj.choices[0].text.startswith("{") and "".join(obj.choices[0].logprobs.tokens) == obj.choices[0].text


def test_a_schema_the_engine_cannot_compile_is_a_400(client: Any) -> None:
    import openai

    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "(("}}}
    with pytest.raises(openai.BadRequestError, match="cannot be used for structured output") as caught:
        client.chat.completions.create(model=CHAT, messages=MESSAGES, response_format=bad, stream=True)
    assert caught.value.body["param"] == "response_format"


def schema_form(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


def test_issue_50s_hostile_schemas_are_400s_before_any_compute(client: Any) -> None:
    """A $ref loop, a required self-recursive object, an anyOf of 5,000 objects: 200 "stop" over "" or "{" once."""
    import openai

    for schema in ({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}},
                   {"type": "object", "properties": {"child": {"$ref": "#"}}, "required": ["child"]},
                   {"anyOf": [{"type": "object", "properties": {f"k{i}": {"type": "integer"}}, "required": [f"k{i}"]}
                              for i in range(5000)]}):
        with pytest.raises(openai.BadRequestError, match="cannot be used for structured output") as caught:
            client.chat.completions.create(model=CHAT, messages=MESSAGES, response_format=schema_form(schema))
        assert caught.value.body["param"] == "response_format" and caught.value.body["code"] == "invalid_input"


# Past the web's probe (its first 64 bytes are the string), then a choice between two objects of 300 optional
# properties, a parser row of 2,414 items where llguidance's hold 2,000: every answer reaches it, and the engine
# cannot go on there.
STALLS = {"type": "object", "properties": {
    "s": {"type": "string", "minLength": 100, "maxLength": 100},
    "x": {"anyOf": [{"type": "object", "properties": {f"b{j}_{i}": {"type": "integer"} for i in range(300)}}
                    for j in range(2)]}},
    "required": ["s", "x"], "additionalProperties": False}


def test_a_grammar_the_engine_cannot_go_on_with_ends_with_an_error_not_stop(client: Any) -> None:
    """Whole: a 400 that says so. Streamed: the JSON so far, then OpenAI's error event (no finish_reason, no [DONE])."""
    import openai

    with pytest.raises(openai.BadRequestError, match="cannot be followed to its end: the grammar engine stopped "
                                                     "after .* generated tokens .*row has 2414 items") as caught:
        client.chat.completions.create(model=CHAT, messages=MESSAGES, max_tokens=300, temperature=0,
                                       response_format=schema_form(STALLS))
    assert caught.value.body["code"] == "invalid_input"
    texts, reasons = [], []
    with pytest.raises(openai.APIError, match="cannot be followed to its end"):
        for chunk in client.chat.completions.create(model=CHAT, messages=MESSAGES, max_tokens=300, temperature=0,
                                                    response_format=schema_form(STALLS), stream=True):
            texts.append(chunk.choices[0].delta.content or "")
            reasons.append(chunk.choices[0].finish_reason)
    written = "".join(texts)
    assert written.startswith('{"s":"') and len(written) >= 100 and reasons == [None] * len(reasons)


def test_bad_parameters_are_400s(client: Any, stack: Stack) -> None:
    import openai

    bad: list[tuple[dict[str, Any], str]] = [
        ({"temperature": -0.5}, "temperature"), ({"temperature": 1e308}, "temperature"), ({"n": 99}, "n"),
        ({"top_p": 0}, "top_p"), ({"stop": [""]}, "stop"), ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"max_tokens": 100_000}, "max_tokens"), ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"tools": [{}]}, "tools"),
    ]
    for extra, param in bad:
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model=CHAT, messages=MESSAGES, **extra)
        assert caught.value.body["param"] == param, (extra, caught.value.body)
    with pytest.raises(openai.BadRequestError, match="chat template"):
        client.chat.completions.create(model=PLAIN, messages=MESSAGES, max_tokens=4)
    with pytest.raises(openai.BadRequestError, match="positions"):
        client.completions.create(model=PLAIN, prompt="word " * 300, max_tokens=4)
    with pytest.raises(openai.NotFoundError, match="not a text-generation"):
        client.completions.create(model=CLS, prompt="hello", max_tokens=4)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="hello")
    raw = httpx.post(f"{stack.url}/v1/completions", content=b'{"model": "chat-gpt2", "prompt": "a", '
                     b'"temperature": NaN}', headers={"Authorization": f"Bearer {stack.tokens['all']}",
                                                      "Content-Type": "application/json"})
    assert raw.status_code == 400, raw.text


def test_a_token_is_needed(stack: Stack) -> None:
    response = httpx.post(f"{stack.url}/v1/chat/completions", json={"model": CHAT, "messages": MESSAGES})
    assert response.status_code == 401 and response.json()["error"]["code"] == "unauthorized"


def test_inference_client_chat_completion(stack: Stack, greedy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants
    from huggingface_hub import InferenceClient

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    client = InferenceClient(base_url=f"{stack.url}/v1", api_key=stack.tokens["all"])
    answer = client.chat_completion(MESSAGES, model=CHAT, max_tokens=6, temperature=0)
    assert answer.choices[0].message.content == greedy(chat_prompt(MESSAGES), 6)
    pieces = [c.choices[0].delta.content or "" for c in client.chat_completion(
        MESSAGES, model=CHAT, max_tokens=6, temperature=0, stream=True) if c.choices]
    assert "".join(pieces) == answer.choices[0].message.content


def test_stream_ends_with_done(stack: Stack) -> None:
    lines = []
    with httpx.stream("POST", f"{stack.url}/v1/completions", timeout=60,
                      headers={"Authorization": f"Bearer {stack.tokens['all']}"},
                      json={"model": CHAT, "prompt": "A dog", "max_tokens": 3, "stream": True}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line.startswith("data:")]
    assert lines[-1] == "data: [DONE]" and json.loads(lines[0][5:])["object"] == "text_completion"
