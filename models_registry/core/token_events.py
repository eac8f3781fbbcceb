"""The generation engine's per-token events, in no API's shape: builders for the engine, readers for the web (pure).

Each event is one flat dict: the token's `id`, `text`, `logprob`, `special` and its extras
(inference.row_shaping's `logprobs` entry), and `finish_reason`, None until its sequence's
last event. A token's text is the piece it adds to the sequence's text (possibly "", a
partial character being held back); a special token's is its own name, which the
sequence's text leaves out. The last event carries the finish reason ("eos_token",
"stop_sequence", "length", ...) with `generated_tokens`, `input_length` and `seed`, and
`full_text` only where the pieces do not spell the sequence's text (a partial character
never completed, a decoder that rewrote text already sent). An end-only event has no
token: the sequence ended without a new one. Each API shapes the events on the web side
(api.hf.tgi_events, api.openai.completion_shapes); web and worker deploy together, so
no reader knows an older shape.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypedDict

Event = dict[str, Any]
Token = dict[str, Any]  # {"id", "text", "logprob", "special", **extras}: TGI's token dict


class Summary(TypedDict):
    """How a sequence ended: its finish reason and counts (TGI's stream details, in their order)."""

    finish_reason: str
    generated_tokens: int
    seed: int | None
    input_length: int


SUMMARY_KEYS = tuple(Summary.__annotations__)
END_KEYS = (*SUMMARY_KEYS, "full_text")  # what an event holds besides its token


def token_event(token: Token) -> Event:
    """A token's event, its sequence going on."""
    return {**token, "finish_reason": None}


def last_event(token: Token | None, summary: Summary, text: str, spelled: str) -> Event:
    """A sequence's last event: its last token (None: end-only) and summary; text, the sequence's text, as full_text
    only where it is not what its events' pieces spell (spelled)."""
    event: Event = {**(token or {}), **summary}
    if spelled != text:
        event["full_text"] = text
    return event


def spelled(tokens: Iterable[Token]) -> str:
    """What the tokens' pieces spell (special tokens add nothing)."""
    return "".join(token["text"] for token in tokens if not token["special"])


def is_final(event: Event) -> bool:
    """Whether event is its sequence's last."""
    return event.get("finish_reason") is not None


def token_of(event: Event) -> Token | None:
    """The event's token, TGI's token dict with its extras (None: an end-only event)."""
    if "id" not in event:
        return None
    return {key: value for key, value in event.items() if key not in END_KEYS}


def added_text(event: Event) -> str:
    """The text event adds to its sequence's ("" for a special token or an end-only event)."""
    return "" if "id" not in event or event["special"] else event["text"]


def text_after(text: str, event: Event) -> str:
    """The sequence's text once event is taken, text being its text before it."""
    return event["full_text"] if "full_text" in event else text + added_text(event)


def summary(event: Event) -> Summary | None:
    """How the sequence ended, on its last event (None on the others)."""
    if not is_final(event):
        return None
    return Summary(finish_reason=event["finish_reason"], generated_tokens=event["generated_tokens"],
                   seed=event.get("seed"), input_length=event["input_length"])
