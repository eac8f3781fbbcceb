"""OpenAI's logprobs of a choice, whole and per chunk, from the worker's token events (pure)."""

from __future__ import annotations

from typing import Any

from models_registry.api.openai.completion_shapes import Choice, Shaper
from models_registry.api.openai.logprob_shapes import Released, token_text
from models_registry.core import token_events


def event(text: str, logprob: float, top: list[tuple[str, float]] | None = None, special: bool = False,
          raw: bytes | None = None, final: bool = False) -> dict[str, Any]:
    """A worker's token event with the logprob entry inference.row_shaping adds (final: its sequence's last)."""
    entry = {"logprob": logprob, "bytes": list(raw if raw is not None else text.encode()),
             "top": [[list(t.encode()), lp] for t, lp in top or []]}
    token = {"id": 1, "text": text, "logprob": logprob, "special": special, "logprobs": entry}
    if not final:
        return token_events.token_event(token)
    summary = token_events.Summary(finish_reason="length", generated_tokens=3, seed=None, input_length=2)
    return token_events.last_event(token, summary, "", "")  # the text is the pieces


def test_a_partial_character_shows_its_bytes_escaped() -> None:
    assert token_text(list("é".encode())) == "é"
    assert token_text([0xC3]) == "\\xc3"


def test_chat_and_completions_shapes_of_a_whole_answer() -> None:
    choice = Choice(index=0, stops=[], logprobs=Released([]))
    for e in (event("Hello", -0.5, [("Hello", -0.5), ("Hi", -1.5)]), event(" world", -1.0, [(" world", -1.0)]),
              event("<eos>", -0.1, special=True, final=True)):
        choice.take(e)
    chat = Shaper(chat=True, model="m", n=1).answer([choice])["choices"][0]["logprobs"]
    assert [c["token"] for c in chat["content"]] == ["Hello", " world"]  # the EOS has no entry
    assert chat["content"][0] == {"token": "Hello", "logprob": -0.5, "bytes": list(b"Hello"), "top_logprobs": [
        {"token": "Hello", "logprob": -0.5, "bytes": list(b"Hello")},
        {"token": "Hi", "logprob": -1.5, "bytes": list(b"Hi")}]}
    completion = Shaper(chat=False, model="m", n=1).answer([choice])["choices"][0]["logprobs"]
    assert completion == {"tokens": ["Hello", " world"], "token_logprobs": [-0.5, -1.0],
                          "top_logprobs": [{"Hello": -0.5, "Hi": -1.5}, {" world": -1.0}], "text_offset": [0, 5]}


def test_completions_top_logprobs_hold_the_token_itself_even_with_none_asked() -> None:
    choice = Choice(index=0, stops=[], logprobs=Released([]))
    choice.take(event("a", -2.0, final=True))
    shaped = Shaper(chat=False, model="m", n=1).answer([choice])["choices"][0]["logprobs"]
    assert shaped["top_logprobs"] == [{"a": -2.0}]


def test_without_logprobs_asked_they_are_null() -> None:
    choice = Choice(index=0, stops=[])
    choice.take(event("a", -2.0, final=True))
    assert Shaper(chat=True, model="m", n=1).answer([choice])["choices"][0]["logprobs"] is None
    assert choice.new_logprobs() is None


def test_a_stop_sequence_drops_the_entries_of_what_it_cut() -> None:
    choice = Choice(index=0, stops=["END"], logprobs=Released([]))
    for e in (event("one", -1.0), event(" E", -2.0), event("ND", -3.0), event(" more", -4.0)):
        choice.take(e)
    assert choice.content == "one " and choice.finish_reason == "stop"
    assert [e.logprob for e in choice.all_logprobs() or []] == [-1.0, -2.0]  # " E" starts before the cut


def test_streamed_entries_come_with_the_text_that_shows_them() -> None:
    """A token held back (a possible stop sequence, part of a character) is sent with the text that shows it."""
    choice = Choice(index=0, stops=["XY"], logprobs=Released([]))
    sent: list[tuple[str, list[float]]] = []
    for e in (event("ab", -1.0), event("X", -2.0), event("", -3.0, raw=b"\xc3"), event("é", -4.0, raw=b"\xa9"),
              event("!", -5.0, final=True)):
        text = choice.take(e).content
        entries = choice.new_logprobs() or []
        sent.append((text, [x.logprob for x in entries]))
    assert sent == [("ab", [-1.0]), ("", []), ("", []), ("Xé", [-2.0, -3.0, -4.0]), ("!", [-5.0])]
    chunk = Shaper(chat=False, model="m", n=1).chunk(0, "Xé", None, False, choice.all_logprobs()[1:4])
    assert chunk["choices"][0]["logprobs"]["text_offset"] == [2, 3, 3]
    assert chunk["choices"][0]["logprobs"]["tokens"] == ["X", "\\xc3", "\\xa9"]
    assert Shaper(chat=True, model="m", n=1).chunk(0, "x", None, False, [])["choices"][0]["logprobs"] is None
