"""A model's vocabulary as the grammar engine (llguidance) sees it: built once per tokenizer, shared by its rows.

It gives each token's bytes (OpenAI's logprobs carry them: a byte-level token may be part
of a character) and is what a structured-output grammar is instantiated for. It is built
once, the first time a row of the model asks for logprobs or structured output, and holds
the GIL while it is built (the worker's liveness thread waits meanwhile): a byte-level BPE
(GPT-2, Llama 3, Qwen) is read here from its vocabulary (about 0.1 s for 50,257 tokens),
as llguidance's own reader of a tokenizer's JSON took 8-18 s for one with 50,000 added
tokens; other kinds go through that reader (about 0.4 s for 50,257 tokens).
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
            tokens = byte_level_tokens(tokenizer)
            if tokens is not None and eos:
                self.engine = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Tokens(tokenizer, tokens, eos)),
                                                     n_vocab=size, eos_token=eos)
            else:
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


class _Tokens:
    """A tokenizer as llguidance's TokenizerWrapper reads it: its tokens' bytes, ids and encoder."""

    def __init__(self, tokenizer: Any, tokens: list[bytes], eos: list[int]) -> None:
        self.tokenizer = tokenizer
        self.tokens = tokens
        self.eos_token_id = eos[0]
        self.bos_token_id = tokenizer.bos_token_id
        self.special_token_ids = sorted(set(tokenizer.all_special_ids) | set(eos) | {
            i for i, t in tokenizer.added_tokens_decoder.items() if t.special})

    def __call__(self, text: bytes | str) -> list[int]:
        """The token ids of text (grammars' literal strings)."""
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return list(self.tokenizer.encode(text, add_special_tokens=False))


def byte_level_tokens(tokenizer: Any) -> list[bytes] | None:
    """Each token's bytes when the tokenizer is a byte-level BPE (its decoder is ByteLevel); else None."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or type(backend.decoder).__name__ != "ByteLevel":
        return None
    byte_of = byte_decoder()
    added = {i: t.content for i, t in tokenizer.added_tokens_decoder.items()}
    tokens = []
    for token_id, token in enumerate(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))):
        if token_id in added:
            tokens.append(added[token_id].encode())
        elif token is None or any(c not in byte_of for c in token):
            return None  # not the byte-level alphabet after all
        else:
            tokens.append(bytes(byte_of[c] for c in token))
    return tokens


def byte_decoder() -> dict[str, int]:
    """The byte-level BPE alphabet (GPT-2's bytes_to_unicode), character -> byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = list(printable), 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def vocabulary(tokenizer: Any, size: int, eos: set[int]) -> Vocabulary:
    """The tokenizer's Vocabulary for logits of size entries (built on first use, then shared)."""
    with _lock:
        found = _built.get(tokenizer)
        if found is None or found.size != size:
            found = _built[tokenizer] = Vocabulary(tokenizer, size, sorted(eos))
        return found
