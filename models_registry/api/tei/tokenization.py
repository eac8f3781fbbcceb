"""Tokenizers in the web process, for POST /tokenize: loaded alone (no model, no worker), cached.

A model's `tokenizer.json` is all `/tokenize` needs: the `tokenizers` library reads it in
tens of milliseconds and encodes in microseconds, without torch or transformers, so the
web process answers at once instead of queueing behind batches on a worker. Truncation
follows the rule the worker applies (sentence_bert_config's max_seq_length, else tokenizer_config's
model_max_length when sane, else 512, from its truncation side; lower case where the files say so), and a text is cut to what that truncation can keep before
it is encoded, as the worker cuts an encoder's texts.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Encoding, Tokenizer, normalizers

from models_registry.catalog import readable_text
from models_registry.core import model_files, model_layout, sources
from models_registry.core.errors import NotFound, Unavailable

logger = logging.getLogger(__name__)

CACHE_SIZE = 32  # tokenizers held per web process (MiniLM's: about 1 MiB each)
DEFAULT_MAX_TOKENS = 512  # as the worker, when the tokenizer names no sane limit

_cache: OrderedDict[tuple[str, str], Tokenizer] = OrderedDict()
_locks: dict[tuple[str, str], asyncio.Lock] = {}


@dataclass(frozen=True)
class Token:
    """One token as TEI's /tokenize answers it."""

    id: int
    text: str
    special: bool
    start: int | None
    stop: int | None


def _file(source: str, revision: str, name: str) -> Path | None:
    """A file of the model, local or from the hub (None when it has none)."""
    local = Path(source).expanduser()
    if local.is_dir():
        path = local / name
        return path if path.is_file() else None
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    try:
        return Path(hf_hub_download(source, name, revision=revision or None))
    except EntryNotFoundError:
        return None


def load(source: str, revision: str) -> Tokenizer:
    """The model's fast tokenizer with the worker's truncation and no padding (blocking)."""
    path = _file(source, revision, "tokenizer.json")
    if path is None:
        raise NotFound(f"{sources.public_source(source)} has no tokenizer.json (a fast tokenizer), "
                       "so it cannot serve /tokenize")
    tokenizer = Tokenizer.from_file(str(path))
    config_path = _file(source, revision, "tokenizer_config.json")
    config: dict[str, Any] = json.loads(config_path.read_text()) if config_path else {}
    limit = config.get("model_max_length")
    limit = limit if isinstance(limit, int) and 0 < limit < 100_000 else DEFAULT_MAX_TOKENS
    side = config.get("truncation_side") if config.get("truncation_side") in ("left", "right") else "right"
    layout = _layout(source, revision)
    if layout.max_seq_length:  # sentence_bert_config.json's length is what an embedding keeps (core.model_layout)
        limit = layout.max_seq_length
    if layout.do_lower_case:
        tokenizer.normalizer = normalizers.Sequence(
            [normalizers.Lowercase(), *([tokenizer.normalizer] if tokenizer.normalizer is not None else [])])
    tokenizer.no_padding()
    tokenizer.enable_truncation(limit, direction=side)
    return tokenizer


def _layout(source: str, revision: str) -> model_layout.ModelLayout:
    """What the model's sentence-transformers files say (nothing, where they are absent or not computed here)."""
    try:
        return model_layout.parse_layout(model_files.file_reader(source, revision or None))
    except (model_layout.UnsupportedLayout, OSError):
        return model_layout.ModelLayout()


async def get(source: str, revision: str) -> Tokenizer:
    """The cached tokenizer of source@revision, loaded in a thread on first use."""
    key = (source, revision)
    if key in _cache:
        _cache.move_to_end(key)
        return _cache[key]
    lock = _locks.setdefault(key, asyncio.Lock())
    async with lock:
        if key not in _cache:
            try:
                tokenizer = await asyncio.to_thread(load, source, revision)
            except NotFound:
                raise
            except Exception as error:  # noqa: BLE001 - a hub that does not answer, a file that does not parse
                # The error names local paths: the log has it, the client gets the public source only.
                logger.warning("could not load the tokenizer of %s: %s: %s", source, type(error).__name__, error)
                raise Unavailable(f"could not load the tokenizer of {sources.public_source(source)} "
                                  f"({type(error).__name__}); an operator can see why in the server log") from None
            _cache[key] = tokenizer
            while len(_cache) > CACHE_SIZE:
                _cache.popitem(last=False)
    _locks.pop(key, None)
    return _cache[key]


def tokens(encoding: Encoding, text: str, shift: int = 0) -> list[Token]:
    """TEI's tokens of one input: special ones carry their token string and no offsets.

    shift: where the part encoded starts in text (a text cut on the left, catalog.readable_text).
    """
    result = []
    for token_id, (start, stop), special, piece in zip(encoding.ids, encoding.offsets,
                                                      encoding.special_tokens_mask, encoding.tokens):
        if special:
            result.append(Token(token_id, piece, True, None, None))
        else:
            result.append(Token(token_id, text[start + shift:stop + shift], False, start + shift, stop + shift))
    return result


def readable(tokenizer: Tokenizer, text: str) -> tuple[str, int]:
    """The part of text the tokenizer's truncation can keep, and where it starts in text.

    As the worker cuts an encoder's texts (catalog.readable_text): the same tokens come out,
    but a 1 MB text costs what max_length tokens cost (the whole text, tokenized, held a
    hundred megabytes and seconds of the web process before truncation dropped it).
    """
    truncation = tokenizer.truncation
    if not truncation:
        return text, 0
    limit = readable_text.readable_chars(int(truncation.get("max_length") or DEFAULT_MAX_TOKENS))
    if len(text) <= limit:
        return text, 0
    if truncation.get("direction") == "left":
        return text[-limit:], len(text) - limit
    return text[:limit], 0


def tokenize(tokenizer: Tokenizer, texts: list[str], add_special_tokens: bool) -> list[list[Token]]:
    """Every input's tokens (character offsets into that input), each text cut to what truncation keeps first."""
    parts = [readable(tokenizer, text) for text in texts]
    encodings = tokenizer.encode_batch([part for part, _ in parts], add_special_tokens=add_special_tokens)
    return [tokens(encoding, text, shift) for encoding, text, (_, shift) in zip(encodings, texts, parts)]
