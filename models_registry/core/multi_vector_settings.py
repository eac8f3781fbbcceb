"""How a ColBERT-style (multi-vector) model encodes queries and documents, from the knobs its files say.

The rules are sentence-transformers 6.2's MultiVectorEncoder's, read from its source: a native save carries
`query_length`, `document_length` and `query_expansion` in sentence_bert_config.json and the skiplist in its
MultiVectorMask module; a PyLate save carries `query_prefix`, `document_prefix`, `query_length`,
`document_length`, `do_query_expansion`, `attend_to_expansion_tokens` and `skiplist_words` at the top of
config_sentence_transformers.json, translated as sentence-transformers translates them (the query length
becomes a fixed [MASK] expansion, punctuation is skipped by default). core.model_layout collects the knobs;
what this server does not compute (processing overrides, a chat-template backbone) is refused by name.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any

PUNCTUATION = tuple(string.punctuation)  # PyLate's and Stanford ColBERT's default skiplist
LENGTH_KEYS = ("query_length", "document_length", "query_expansion")
# Keys that mark a PyLate save (sentence-transformers turns on a fixed query expansion for them).
PYLATE_MARKERS = (*LENGTH_KEYS, "do_query_expansion", "attend_to_expansion_tokens", "attend_to_mask_tokens",
                  "query_prefix", "document_prefix", "skiplist_words")
SIMILARITIES = ("maxsim", "meanmaxsim")
EXPANSION_KEYS = ("strategy", "attend", "token", "length")
PLAIN_TEXT = {"text": {"method": "forward", "method_output_name": "last_hidden_state"}}


class UnsupportedMultiVector(ValueError):
    """A knob of a multi-vector model this server does not compute: refused, not guessed."""


@dataclass(frozen=True)
class Expansion:
    """ColBERT's query expansion: queries padded with a token (the mask token by default) up to `length`."""

    strategy: str  # "fixed": every query is exactly length tokens; "min": at least length (longer ones kept)
    length: int
    attend: bool = False  # whether the encoder attends to the expansion positions (they are scored either way)
    token: str | None = None  # None: the tokenizer's mask token, else its EOS token


@dataclass(frozen=True)
class MultiVectorSettings:
    """What sentence-transformers' MultiVectorEncoder does for each side (query, document) of this model."""

    query_length: int | None = None  # a query's most tokens (None: the model's max length)
    document_length: int | None = None
    expansion: Expansion | None = None
    masked: bool = True  # a MultiVectorMask: expansion positions are scored, the skiplist applies
    skiplist_words: tuple[str, ...] = ()  # tokens left out of the vectors (on the skiplist_tasks sides)
    skiplist_tasks: tuple[str, ...] = ("document",)
    keep_only_token_ids: tuple[int, ...] | None = None  # documents keep only these token ids (None: all)
    prefixes: tuple[str, ...] = ()  # legacy prefix tokens sentence-transformers registers as special tokens
    similarity: str = "maxsim"  # meanmaxsim: MaxSim divided by the query's token count

    def summary(self) -> str:
        """One line for the admin and `GET /models/<name>`."""
        parts = [self.similarity]
        if self.expansion is not None:
            parts.append(f"queries {self.expansion.strategy}-expanded to {self.expansion.length} tokens"
                         f" ({'attended' if self.expansion.attend else 'not attended'})")
        for side, length in (("query", self.query_length), ("document", self.document_length)):
            if length is not None:
                parts.append(f"{side} length {length}")
        if self.skiplist_words and self.masked:
            parts.append(f"{len(self.skiplist_words)} skiplist tokens left out of {'/'.join(self.skiplist_tasks)}s")
        return "; ".join(parts)


def read(kind: str, knobs: dict[str, Any]) -> MultiVectorSettings:
    """The settings of a model whose layout has these knobs (model_type kind); raises UnsupportedMultiVector."""
    config, transformer = knobs.get("config") or {}, knobs.get("transformer") or {}
    _refuse_processing(transformer)
    lengths = {**_legacy_lengths(config), **{k: transformer[k] for k in LENGTH_KEYS if k in transformer}}
    expansion = _expansion(lengths.get("query_expansion"))
    query_length, document_length = _length(lengths, "query_length"), _length(lengths, "document_length")
    if expansion is not None and query_length is not None and query_length < expansion.length:
        raise UnsupportedMultiVector(f"query_length {query_length} is below query_expansion length {expansion.length}"
                                     " (sentence-transformers refuses this model too)")
    prefixes = {key: config[key] or "" for key in ("query_prefix", "document_prefix") if key in config}
    mask = knobs.get("mask")
    if kind == "MultiVectorEncoder":  # its own save: the module list as it is
        words = (mask or {}).get("skiplist_words") or []
        tasks = (mask or {}).get("skiplist_tasks") or ["document"]
        keep = (mask or {}).get("keep_only_token_ids")
    else:  # PyLate's saves: sentence-transformers appends a MultiVectorMask with PyLate's skiplist
        words = config.get("skiplist_words")
        if words is None:  # PyLate 3 always skipped punctuation; an older save where it had prefixes
            words = PUNCTUATION if kind == "ColBERT" or prefixes else ()
        tasks, keep = ["document"], None
    similarity = config.get("similarity_fn_name")
    return MultiVectorSettings(
        query_length=query_length, document_length=document_length, expansion=expansion,
        masked=mask is not None or kind != "MultiVectorEncoder",
        skiplist_words=tuple(str(w) for w in words), skiplist_tasks=tuple([tasks] if isinstance(tasks, str) else tasks),
        keep_only_token_ids=None if keep is None else tuple(int(i) for i in keep),
        prefixes=tuple(p for p in prefixes.values() if p.strip()),
        similarity=similarity if similarity in SIMILARITIES else "maxsim")


def _refuse_processing(transformer: dict[str, Any]) -> None:
    if transformer.get("processing_kwargs"):
        raise UnsupportedMultiVector("sentence_bert_config.json: processing_kwargs (tokenizer overrides) are not "
                                     "computed here for a multi-vector model")
    if transformer.get("modality_config") not in (None, PLAIN_TEXT):
        raise UnsupportedMultiVector("sentence_bert_config.json: only a text model's forward (last_hidden_state) is "
                                     "computed here for a multi-vector model, not "
                                     f"{transformer['modality_config']!r}")
    if transformer.get("transformer_task") not in (None, "feature-extraction"):
        raise UnsupportedMultiVector(f"sentence_bert_config.json: transformer_task {transformer['transformer_task']!r}"
                                     " is not computed here for a multi-vector model")


def _legacy_lengths(config: dict[str, Any]) -> dict[str, Any]:
    """PyLate's top-level knobs as sentence-transformers 6.2 translates them (they give way to the Transformer's)."""
    lengths = {k: config[k] for k in LENGTH_KEYS if k in config and (config[k] is not None or k == "query_expansion")}
    if "query_expansion" not in lengths and any(k in config for k in PYLATE_MARKERS):
        if config.get("do_query_expansion") is False:
            lengths["query_expansion"] = None
        else:  # PyLate's query length is the width it pads queries to with [MASK] (32 by default)
            attend = config.get("attend_to_expansion_tokens", config.get("attend_to_mask_tokens"))
            lengths["query_expansion"] = {"strategy": "fixed", "attend": bool(attend),
                                          "length": lengths.pop("query_length", None) or 32}
    return lengths


def _expansion(value: Any) -> Expansion | None:
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - set(EXPANSION_KEYS):
        raise UnsupportedMultiVector(f"query_expansion {value!r}: a JSON object with keys {', '.join(EXPANSION_KEYS)}")
    length, attend, token = value.get("length"), value.get("attend", False), value.get("token")
    if value.get("strategy") not in ("fixed", "min"):
        raise UnsupportedMultiVector(f"query_expansion strategy {value.get('strategy')!r} is not fixed or min")
    if not isinstance(length, int) or isinstance(length, bool) or length < 1 or not isinstance(attend, bool):
        raise UnsupportedMultiVector(f"query_expansion {value!r}: length must be a positive integer, attend a boolean")
    if token is not None and not isinstance(token, str):
        raise UnsupportedMultiVector(f"query_expansion token {token!r} is not a token")
    return Expansion(strategy=value["strategy"], length=length, attend=attend, token=token)


def _length(lengths: dict[str, Any], key: str) -> int | None:
    value = lengths.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise UnsupportedMultiVector(f"{key} {value!r} is not a positive number of tokens")
    return value
