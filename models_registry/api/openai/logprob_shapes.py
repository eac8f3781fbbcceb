"""OpenAI's logprobs of a choice: chat's `content` entries and completions' four lists, whole or per chunk (pure).

The worker sends each generated token's entry in its stream event (inference.row_shaping:
its bytes, logprob and top alternatives as [bytes, logprob]). A token is shown with the
text it added: an entry is released once the text it starts at is visible to the client,
so a token held back (a possible stop sequence, a partial character) comes with the text
that shows it, and a token past a stop sequence never comes. Special tokens (EOS) are not
in the text and have no entry, as with OpenAI.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def token_text(raw: list[int]) -> str:
    """A token's text from its bytes; a token that is part of a character shows its bytes escaped, as OpenAI's."""
    return bytes(raw).decode("utf-8", errors="backslashreplace")


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token's logprob entry and where its text starts in the choice's text."""

    start: int
    raw: list[int]
    logprob: float
    top: list[tuple[list[int], float]]

    @classmethod
    def of(cls, event_token: dict[str, Any], start: int) -> TokenLogprob | None:
        """The entry a worker's token event carries (None: no logprobs asked, or a special token)."""
        entry = event_token.get("logprobs")
        if not entry or event_token.get("special"):
            return None
        return cls(start=start, raw=list(entry["bytes"]), logprob=float(entry["logprob"]),
                   top=[(list(b), float(lp)) for b, lp in entry.get("top") or []])


def chat_logprobs(entries: list[TokenLogprob]) -> dict[str, Any]:
    """Chat's choice.logprobs: {"content": [{token, logprob, bytes, top_logprobs}], "refusal": null}."""
    return {"content": [{"token": token_text(e.raw), "logprob": e.logprob, "bytes": e.raw,
                         "top_logprobs": [{"token": token_text(b), "logprob": lp, "bytes": b} for b, lp in e.top]}
                        for e in entries], "refusal": None}


def completion_logprobs(entries: list[TokenLogprob]) -> dict[str, Any]:
    """Completions' choice.logprobs: tokens, token_logprobs, top_logprobs (the top and the token itself, as
    OpenAI's "up to logprobs + 1"), text_offset (where each token starts in the choice's text)."""
    tops = []
    for e in entries:
        top = {token_text(b): lp for b, lp in e.top}
        top.setdefault(token_text(e.raw), e.logprob)
        tops.append(top)
    return {"tokens": [token_text(e.raw) for e in entries], "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": tops, "text_offset": [e.start for e in entries]}


@dataclass
class Released:
    """A choice's entries, handed out in order as their text becomes visible."""

    entries: list[TokenLogprob]
    sent: int = 0

    def upto(self, shown: int, everything: bool) -> list[TokenLogprob]:
        """The entries not yet handed out whose text starts before shown (all of them when everything)."""
        end = self.sent
        while end < len(self.entries) and (everything or self.entries[end].start < shown):
            end += 1
        out, self.sent = self.entries[self.sent:end], end
        return out
