"""core.token_events' builders and readers, and api.hf.tgi_events: the token events as TGI's stream events (pure)."""

from __future__ import annotations

from typing import Any

from models_registry.api.hf.tgi_events import TgiShape
from models_registry.core import token_events
from models_registry.core.token_events import Summary

SUMMARY = Summary(finish_reason="eos_token", generated_tokens=3, seed=7, input_length=2)


def token(n: int, text: str, special: bool = False, **extras: Any) -> dict[str, Any]:
    return {"id": n, "text": text, "logprob": -0.5, "special": special, **extras}


def sequence(text: str = "Hello world") -> list[dict[str, Any]]:
    """Three token events: two pieces, then an EOS that ends it."""
    tokens = [token(1, "Hello"), token(2, " world"), token(0, "<eos>", special=True)]
    return [token_events.token_event(tokens[0]), token_events.token_event(tokens[1]),
            token_events.last_event(tokens[2], SUMMARY, text, token_events.spelled(tokens))]


def test_a_token_event_is_its_token_flat_and_goes_on() -> None:
    event = token_events.token_event(token(5, "a", logprobs={"logprob": -0.5, "bytes": [97], "top": []}))
    assert event == {"id": 5, "text": "a", "logprob": -0.5, "special": False,
                     "logprobs": {"logprob": -0.5, "bytes": [97], "top": []}, "finish_reason": None}
    assert not token_events.is_final(event) and token_events.summary(event) is None
    assert token_events.token_of(event) == token(5, "a", logprobs={"logprob": -0.5, "bytes": [97], "top": []})
    assert token_events.added_text(event) == "a" and token_events.text_after("x", event) == "xa"


def test_the_last_event_carries_the_summary_and_its_text_only_where_the_pieces_differ() -> None:
    last = sequence()[-1]
    assert last == {**token(0, "<eos>", special=True), **SUMMARY} and "full_text" not in last
    assert token_events.is_final(last) and token_events.summary(last) == SUMMARY
    assert token_events.token_of(last) == token(0, "<eos>", special=True)
    assert token_events.added_text(last) == ""  # a special token's name is not in the text
    held = token_events.last_event(token(3, ""), SUMMARY, "caf\ufffd", "caf")  # a partial character held back
    assert held["full_text"] == "caf\ufffd" and token_events.text_after("caf", held) == "caf\ufffd"


def test_an_end_only_event_has_no_token_and_adds_no_text() -> None:
    end = token_events.last_event(None, SUMMARY, "ab", "ab")
    assert end == dict(SUMMARY)
    assert token_events.token_of(end) is None and token_events.added_text(end) == ""
    assert token_events.is_final(end) and token_events.summary(end) == SUMMARY
    assert token_events.text_after("ab", end) == "ab"


def test_spelled_leaves_special_tokens_out() -> None:
    assert token_events.spelled([token(1, "a"), token(0, "<s>", special=True), token(2, "b")]) == "ab"


def test_tgi_events_of_a_sequence_with_details() -> None:
    shape = TgiShape(details=True)
    assert [shape.event(e) for e in sequence()] == [
        {"index": 1, "token": token(1, "Hello"), "generated_text": None, "details": None},
        {"index": 2, "token": token(2, " world"), "generated_text": None, "details": None},
        {"index": 3, "token": token(0, "<eos>", special=True), "generated_text": "Hello world",
         "details": {"finish_reason": "eos_token", "generated_tokens": 3, "seed": 7, "input_length": 2}}]


def test_tgi_events_without_details_say_null() -> None:
    shape = TgiShape(details=False)
    events = [shape.event(e) for e in sequence()]
    assert [e["details"] for e in events if e is not None] == [None, None, None]
    assert events[-1] is not None and events[-1]["generated_text"] == "Hello world"


def test_an_end_only_event_says_the_last_token_again_as_tgi_did() -> None:
    tokens = [token(1, "Hello"), token(2, " world")]
    events = [token_events.token_event(t) for t in tokens]
    events.append(token_events.last_event(None, Summary(finish_reason="length", generated_tokens=2, seed=None,
                                                        input_length=4), "Hello world", token_events.spelled(tokens)))
    shape = TgiShape(details=True)
    shaped = [shape.event(e) for e in events]
    assert shaped[-1] == {"index": 2, "token": token(2, " world"), "generated_text": "Hello world",
                          "details": {"finish_reason": "length", "generated_tokens": 2, "seed": None,
                                      "input_length": 4}}
    assert TgiShape(details=True).event(events[-1]) is None  # no token yet: TGI has no event for it


def test_the_generated_text_is_the_full_text_where_the_pieces_differ() -> None:
    tokens = [token(1, "caf"), token(2, "")]  # the last piece held back a partial character
    events = [token_events.token_event(tokens[0]),
              token_events.last_event(tokens[1], SUMMARY, "caf\ufffd", token_events.spelled(tokens))]
    shape = TgiShape(details=False)
    shaped = [shape.event(e) for e in events]
    assert shaped[-1] == {"index": 2, "token": token(2, ""), "generated_text": "caf\ufffd", "details": None}
