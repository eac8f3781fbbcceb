"""OpenAI chat and completions bodies: what the worker gets, and a 400 naming the field for every bad value."""

from __future__ import annotations

from typing import Any

import pytest

from models_registry.api.openai.completion_shapes import Choice, Shaper, visible
from models_registry.api.openai.generation_requests import read, worker_parameters
from models_registry.api.openai.reasoning_split import Pieces, ReasoningSplitter
from models_registry.core import token_events
from models_registry.core.errors import InvalidInput

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_sampling_follows_openai() -> None:
    assert read({**CHAT, "temperature": 0}, chat=True).parameters == {"do_sample": False}
    assert read({**CHAT, "temperature": 0.7, "top_p": 0.9, "max_tokens": 5}, chat=True).parameters == {
        "do_sample": True, "temperature": 0.7, "top_p": 0.9, "max_new_tokens": 5}
    assert read({**CHAT, "max_tokens": 5, "max_completion_tokens": 7}, chat=True).parameters == {"max_new_tokens": 7}
    assert read({**CHAT, "top_p": 1, "temperature": None}, chat=True).parameters == {}


def test_each_choice_has_its_own_seed_and_the_messages() -> None:
    wanted = read({**CHAT, "n": 3, "seed": -1, "stop": "x"}, chat=True)
    assert [worker_parameters(wanted, i)["seed"] for i in range(3)] == [2**63 - 1, 0, 1]
    assert worker_parameters(wanted, 0)["messages"] == CHAT["messages"] and wanted.stops == ["x"]
    assert worker_parameters(wanted, 0)["token_logprob"] is False  # OpenAI reads its own logprob entries
    assert wanted.choices == 3
    prompts = read({"model": "m", "prompt": ["a", "b"], "n": 2}, chat=False)
    assert prompts.choices == 4 and "messages" not in worker_parameters(prompts, 0)


@pytest.mark.parametrize(("body", "param"), [
    ({"temperature": -1}, "temperature"), ({"temperature": float("nan")}, "temperature"),
    ({"temperature": 3}, "temperature"), ({"top_p": 0}, "top_p"), ({"top_p": 1.5}, "top_p"),
    ({"n": 0}, "n"), ({"n": 9}, "n"), ({"max_tokens": 0}, "max_tokens"), ({"max_tokens": 10**6}, "max_tokens"),
    ({"max_tokens": True}, "max_tokens"), ({"stop": [""]}, "stop"), ({"stop": ["a"] * 5}, "stop"),
    ({"stop": [1]}, "stop"), ({"stop": "\ud800"}, "stop"), ({"seed": 2**64}, "seed"), ({"stream": "yes"}, "stream"),
    ({"logprobs": "yes"}, "logprobs"), ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"frequency_penalty": 0.5}, "frequency_penalty"), ({"tools": [{"type": "function"}]}, "tools"),
    ({"tool_choice": "required"}, "tool_choice"), ({"logit_bias": {"50256": -100}}, "logit_bias"),
    ({"presence_penalty": False}, "presence_penalty"), ({"response_format": {"type": "yaml"}}, "response_format"),
    ({"modalities": ["text", "audio"]}, "modalities"), ({"audio": {"voice": "x"}}, "audio"),
    ({"bogus": 1}, "bogus"), ({"model": ""}, "model"), ({"messages": []}, "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages"),
])
def test_bad_values_name_their_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        read({**CHAT, **body}, chat=True)
    assert caught.value.param == param  # type: ignore[attr-defined]


def test_openais_no_op_values_are_accepted_and_change_nothing() -> None:
    no_ops = {"tools": [], "tool_choice": "none", "parallel_tool_calls": True, "logit_bias": {},
              "response_format": {"type": "text"}, "presence_penalty": 0, "frequency_penalty": 0.0,
              "functions": [], "function_call": "none", "modalities": ["text"], "audio": None, "logprobs": False,
              "store": False, "prompt_cache_key": "k", "safety_identifier": "s", "metadata": {"a": "b"}}
    plain = read(CHAT, chat=True)
    assert read({**CHAT, **no_ops}, chat=True) == plain
    assert read({**CHAT, "tool_choice": "auto", "parallel_tool_calls": False}, chat=True) == plain
    completion = {"model": "m", "prompt": "a"}
    assert read({**completion, "echo": False, "best_of": 1, "suffix": "", "logit_bias": {}},
                chat=False) == read(completion, chat=False)


def test_completions_take_prompts_not_token_ids() -> None:
    with pytest.raises(InvalidInput, match="token-id"):
        read({"model": "m", "prompt": [1, 2]}, chat=False)
    with pytest.raises(InvalidInput, match="prompts"):
        read({"model": "m", "prompt": ["a"] * 9}, chat=False)
    assert read({"model": "m", "prompt": ["a"] * 8, "n": 8}, chat=False).choices == 64


def test_a_stop_sequence_is_cut_and_its_prefix_held_back() -> None:
    assert visible("hello wor", ["world"], final=False) == ("hello ", False)
    assert visible("hello world!", ["world"], final=False) == ("hello ", True)
    assert visible("hello wor", ["world"], final=True) == ("hello wor", False)
    assert visible("abc", [], final=False) == ("abc", False)


def piece(text: str, special: bool = False) -> dict[str, Any]:
    """A worker's token dict."""
    return {"id": 1, "text": text, "logprob": 0.0, "special": special}


def going(text: str) -> dict[str, Any]:
    """A worker's token event of text, its sequence going on."""
    return token_events.token_event(piece(text))


def last(token: dict[str, Any] | None, text: str, generated_tokens: int) -> dict[str, Any]:
    """A worker's last event (token None: end-only) of a sequence whose text is text, cut by max_tokens."""
    summary = token_events.Summary(finish_reason="length", generated_tokens=generated_tokens, seed=None,
                                   input_length=3)
    return token_events.last_event(token, summary, text, text)


def test_choices_show_text_in_pieces_and_stop_at_a_stop_sequence() -> None:
    choice = Choice(index=0, stops=["END"])
    pieces = [choice.take(going(t)).content for t in ("one ", "two E", "N")]
    assert pieces == ["one ", "two ", ""] and choice.finish_reason is None
    assert choice.take(going("D more")).content == ""
    assert choice.finish_reason == "stop" and choice.content == "one two "
    ended = Choice(index=1, stops=[])
    ended.take(last(piece("x"), "x", 1))
    usage = Shaper(chat=False, model="m", n=2).usage([choice, ended])
    assert ended.finish_reason == "length" and usage == {"prompt_tokens": 0, "completion_tokens": 1,
                                                         "total_tokens": 1}


def test_an_end_only_event_ends_a_choice_and_a_full_text_replaces_the_pieces() -> None:
    choice = Choice(index=0, stops=[])
    assert choice.take(going("ab")).content == "ab"
    assert choice.take(last(None, "ab", 1)).content == "" and choice.finish_reason == "length"
    assert (choice.content, choice.prompt_tokens, choice.completion_tokens) == ("ab", 3, 1)
    rewritten = Choice(index=1, stops=[])
    rewritten.take(going("a ,"))
    summary = token_events.Summary(finish_reason="eos_token", generated_tokens=2, seed=None, input_length=3)
    rewritten.take(token_events.last_event(piece("b"), summary, "a, b", "a ,b"))  # the decoder rewrote " ,"
    assert rewritten.content == "a, b" and rewritten.finish_reason == "stop"


def test_top_logprobs_without_logprobs_asks_for_none() -> None:
    """The document's fields are independent (schemathesis sends any combination): top_logprobs alone is ignored."""
    from models_registry.api.openai.openai_options import read_logprobs

    assert read_logprobs({"top_logprobs": 2}, chat=True) is None
    assert read_logprobs({"logprobs": False, "top_logprobs": 2}, chat=True) is None
    assert read_logprobs({"logprobs": True, "top_logprobs": 2}, chat=True) == 2


def test_a_choice_with_a_splitter_releases_its_held_tail_with_the_last_event() -> None:
    choice = Choice(index=0, stops=[], splitter=ReasoningSplitter("think"))
    assert choice.take(going("<think>a </th")) == Pieces(reasoning="a")
    told = choice.take(last(piece("", special=True), "<think>a </th", 2))
    assert told == Pieces(reasoning=" </th")  # max_tokens cut the block: all of it is reasoning
    assert (choice.reasoning, choice.content, choice.completion_tokens) == ("a </th", "", 2)
    assert Shaper(chat=True, model="m", n=1).answer([choice])["choices"][0]["message"] == {
        "role": "assistant", "content": "", "reasoning_content": "a </th"}


def test_a_stop_sequence_cuts_the_whole_text_reasoning_included() -> None:
    choice = Choice(index=0, stops=["STOP"], splitter=ReasoningSplitter("think"))
    pieces = [choice.take(going(t)) for t in ("<think>why</think>Par", "is STOP x")]
    assert pieces == [Pieces(reasoning="why", content="Par"), Pieces(content="is ")]
    assert choice.finish_reason == "stop" and (choice.reasoning, choice.content) == ("why", "Paris ")


def test_the_shape_says_what_the_hand_written_reader_did() -> None:
    """api.openai.generation_bodies: JSON's whole-number floats are integers, false is not 0, echoed keys pass."""
    wanted = read({**CHAT, "max_tokens": 5.0, "n": 2.0, "seed": 3.0, "logprobs": True, "top_logprobs": 2.0},
                  chat=True)
    assert (wanted.parameters, wanted.n, wanted.seed, wanted.logprobs) == ({"max_new_tokens": 5}, 2, 3, 2)
    with pytest.raises(InvalidInput) as caught:
        read({**CHAT, "max_tokens": 5.5}, chat=True)
    assert caught.value.param == "max_tokens"  # type: ignore[attr-defined]
    for no_op in ({"frequency_penalty": False}, {"echo": 0}):
        with pytest.raises(InvalidInput) as caught:
            read({"model": "m", "prompt": "a", **no_op}, chat=False)
        assert caught.value.param == next(iter(no_op))  # type: ignore[attr-defined]
    echoed = {"role": "assistant", "content": "hi", "refusal": None, "annotations": []}  # an answer handed back
    assert read({**CHAT, "messages": [echoed]}, chat=True).messages == [{"role": "assistant", "content": "hi"}]


def test_a_bad_item_is_named_by_its_path() -> None:
    with pytest.raises(InvalidInput, match=r"messages\[1\] must be .*messages\[1\]\.content\[0\]\.type"):
        read({**CHAT, "messages": [CHAT["messages"][0], {"role": "user", "content": [{"type": "image_url"}]}]},
             chat=True)
    with pytest.raises(InvalidInput, match=r"response_format\.json_schema: Extra inputs"):
        read({**CHAT, "response_format": {"type": "text", "json_schema": {}}}, chat=True)
    with pytest.raises(InvalidInput, match="surrogate"):
        read({**CHAT, "stop": ["ok", "\udc80"]}, chat=True)
