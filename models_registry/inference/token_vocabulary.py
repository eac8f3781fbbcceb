"""A model's vocabulary as the grammar engine (llguidance) sees it: built once per tokenizer, shared by its rows.

It gives each token's bytes (OpenAI's logprobs carry them: a byte-level token may be part
of a character) and is what a structured-output grammar is instantiated for. Building it
reads the whole vocabulary (about 0.5 s for 50,257 tokens on one core), so it happens once,
the first time a row of the model asks for logprobs or structured output.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import llguidance
import llguidance.hf

from models_registry.core.errors import InvalidInput

_built: weakref.WeakKeyDictionary[Any, Vocabulary] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


class Vocabulary:
    """One tokenizer's tokens as bytes, and its llguidance tokenizer."""

    def __init__(self, tokenizer: Any, size: int, eos: list[int]) -> None:
        try:
            self.engine = llguidance.hf.from_tokenizer(tokenizer, n_vocab=size, eos_token=eos or None)
        except ValueError as error:  # a slow (Python) tokenizer, or one without an end-of-sequence token
            raise InvalidInput(f"logprobs and structured output need a fast tokenizer with an end-of-sequence "
                               f"token; this model's cannot be used: {error}") from None
        self.size = size
        self._bytes: dict[int, list[int]] = {}

    def token_bytes(self, token: int) -> list[int]:
        """The token's bytes, as OpenAI's logprobs list them."""
        found = self._bytes.get(token)
        if found is None:
            found = self._bytes[token] = list(self.engine.decode_bytes([token]))
        return found


def vocabulary(tokenizer: Any, size: int, eos: set[int]) -> Vocabulary:
    """The tokenizer's Vocabulary for logits of size entries (built on first use, then shared)."""
    with _lock:
        found = _built.get(tokenizer)
        if found is None or found.size != size:
            found = _built[tokenizer] = Vocabulary(tokenizer, size, sorted(eos))
        return found
