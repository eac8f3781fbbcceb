"""Text Generation Inference's stream events, built from one sequence's token events (core.token_events; pure).

TGI's event is `{"index", "token": {"id", "text", "logprob", "special"}, "generated_text",
"details"}`: index counts the tokens from 1; the last event carries the sequence's whole
text and, when the request asked for details, its finish reason and counts. An end-only
event (the sequence ended without a new token) says its last token again, as the last.
"""

from __future__ import annotations

from typing import Any

from models_registry.core import token_events


class TgiShape:
    """TGI's events of one sequence, one for each of its token events, in order."""

    def __init__(self, details: bool) -> None:
        self.details = details  # the last event's details shown (else null, as every other's)
        self.index = 0
        self.text = ""  # the sequence's text so far
        self.last: token_events.Token | None = None

    def event(self, event: token_events.Event) -> dict[str, Any] | None:
        """TGI's event of event (None: an end-only event before any token, which TGI has no event for)."""
        token = token_events.token_of(event)
        if token is not None:
            self.index += 1
            self.last = token
        elif self.last is None:
            return None
        self.text = token_events.text_after(self.text, event)
        summary = token_events.summary(event)
        return {"index": self.index, "token": self.last, "generated_text": None if summary is None else self.text,
                "details": summary if self.details else None}
