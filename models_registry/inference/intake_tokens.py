"""Tokenize each text once: the ids counted at intake (for batching) are the ids the packed forward uses.

Issue 26 measured the worker's host work per item as the limit on a GPU: the intake counted
every text with one `encode` call each and threw the ids away, then the forward tokenized the
same texts again through the transformers wrapper. Here intake encodes a request's texts in
one batch call of a truncating copy of the model's fast tokenizer, and every text of a
feature-extraction request travels to the forward as a TokenizedText (a str carrying its ids),
so the forward tokenizes only texts it cannot reuse (a prompt, left truncation).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from tokenizers import Tokenizer

logger = logging.getLogger(__name__)

# Texts the load-time check compares (the wrapper's ids against the copy's): short, long,
# special characters, and one longer than any model so truncation is compared too.
CHECK_TEXTS = ("Hello there.", "ok", "", "Ünïcödé, émojis 🙂 and\ttabs  and   spaces.",
               "a somewhat longer sentence " * 200)


class TokenizedText(str):
    """A text input with the token ids (and token type ids) intake counted it with."""

    ids: list[int]
    types: list[int] | None


def tokenized(text: str, ids: list[int], types: list[int] | None) -> TokenizedText:
    """text as a TokenizedText carrying ids and types."""
    item = TokenizedText(text)
    item.ids = ids
    item.types = types
    return item


def intake_tokenizer(hf_tokenizer: Any, max_tokens: int) -> tuple[Tokenizer, bool] | None:
    """A truncating copy of hf_tokenizer's fast backend and whether token types go to the model; None if its ids differ.

    The copy truncates on the right to max_tokens, special tokens kept, as the wrapper's
    tokenizer(texts, truncation=True, max_length=max_tokens) does; checked against the
    wrapper on CHECK_TEXTS at load, so a tokenizer the wrapper post-processes differently
    keeps the forward's own tokenization.
    """
    backend = getattr(hf_tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    copy = Tokenizer.from_str(backend.to_str())
    copy.no_padding()
    copy.enable_truncation(max_length=max_tokens, direction="right")
    with_types = "token_type_ids" in getattr(hf_tokenizer, "model_input_names", ())
    try:
        expected = hf_tokenizer(list(CHECK_TEXTS), truncation=True, max_length=max_tokens)
        got = copy.encode_batch(list(CHECK_TEXTS))
    except Exception as error:  # a tokenizer that refuses these texts: no reuse, the forward tokenizes
        logger.info("intake tokenization off: %s: %s", type(error).__name__, error)
        return None
    same = [e.ids for e in got] == [list(x) for x in expected["input_ids"]]
    if same and with_types:
        same = [e.type_ids for e in got] == [list(x) for x in expected.get("token_type_ids", [])]
    if not same:
        logger.info("intake tokenization off: the fast tokenizer's ids differ from the wrapper's")
        return None
    return copy, with_types


def encode(tokenizer: Tokenizer, with_types: bool, texts: Sequence[str]) -> list[TokenizedText]:
    """texts as TokenizedText, in one batch call."""
    return [tokenized(text, e.ids, e.type_ids if with_types else None)
            for text, e in zip(texts, tokenizer.encode_batch(list(texts)))]


class RecentTexts:
    """The last texts encoded, by text: a request's n choices come as n requests, and are tokenized once."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self.entries: OrderedDict[str, TokenizedText] = OrderedDict()

    def encode(self, tokenizer: Tokenizer, with_types: bool, texts: Sequence[str]) -> list[TokenizedText]:
        """texts as TokenizedText, encoding only those not seen lately (in one batch call)."""
        missing = [text for text in dict.fromkeys(texts) if text not in self.entries]
        for item in encode(tokenizer, with_types, missing) if missing else []:
            self.entries[str(item)] = item
        found = []
        for text in texts:
            self.entries.move_to_end(text)
            found.append(self.entries[text])
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)
        return found


def reusable(texts: Sequence[Any]) -> list[TokenizedText] | None:
    """texts when every one carries its intake ids; None where the forward must tokenize."""
    if texts and all(isinstance(t, TokenizedText) for t in texts):
        return list(texts)  # type: ignore[arg-type]
    return None
