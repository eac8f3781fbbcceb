"""Structured output: a JSON schema compiled into the grammar a generation is constrained by (llguidance).

The web compiles and checks the grammar from the schema's canonical text (tasks.schema_bounds: bounded
first, so a compile takes about 0.1 s at most), off its event loop (api.openai.structured_output), so a schema
the engine cannot take is a 400 before anything is queued; the worker only instantiates it for its
tokenizer (inference.grammar_mask). The grammar does not depend on the tokenizer. The checks, in order:
the bounds; a $ref cycle with no finite instance (tasks.schema_instances); the engine's own compile;
and a probe, a matcher over a 257-token byte vocabulary that writes the first PROBE_STEPS bytes of an
answer (what is forced, else the first byte of PREFERRED allowed), since llguidance accepts some grammars
it then cannot write (an anyOf of 5,000 objects: "{" and no further; a required self-recursive object).
The JSON is compact: no whitespace between tokens and "," / ":" as separators, so a model cannot spend
its tokens on spaces or newlines. Why llguidance: docs/generation.md (the per-step mask cost measured
against xgrammar and outlines-core on a 50,257-token vocabulary).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import llguidance
import orjson

from models_registry.tasks.schema_bounds import SchemaError, canonical
from models_registry.tasks.schema_instances import no_finite_instance

COMPACT = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}
ANY_OBJECT: dict[str, Any] = {"type": "object"}  # OpenAI's json_object: a JSON object, whatever its keys
PROBE_STEPS = 64
# The probe's choice where the grammar leaves one: end a string, a value, an object or array first, so that
# it reaches what comes after them; then literals; then the lowest byte allowed.
PREFERRED = b'",:}]0-tfn{['
EOS = 256  # the probe vocabulary's end of sequence, after the 256 bytes
REASON_CHARS = 300  # of the engine's message, in an error a client reads


def compile_schema(schema: dict[str, Any], strict: bool = False) -> str:
    """The grammar (llguidance's serialized form) of schema; SchemaError when it cannot be used."""
    return compile_canonical(canonical(schema, strict))


def compile_canonical(text: str) -> str:
    """The grammar of a schema's canonical text (tasks.schema_bounds.canonical); SchemaError when it cannot be used.

    Blocks for up to about 0.1 s within the bounds; llguidance drops the GIL while it compiles.
    """
    return checked(orjson.loads(text), lambda: llguidance.LLMatcher.grammar_from_json_schema(text, defaults=COMPACT))


def checked(schema: Any, build: Callable[[], str]) -> str:
    """The grammar build() makes for schema, refused (SchemaError) when schema has no finite instance, the engine
    rejects it, or it cannot write its first bytes: the one sequence every grammar of ours goes through."""
    problem = no_finite_instance(schema)
    if problem:
        raise SchemaError(problem)
    try:
        grammar = build()
    except ValueError as error:
        raise SchemaError(engine_reason(str(error))) from None
    problem = probe(grammar)
    if problem:
        raise SchemaError(problem)
    return grammar


def probe(grammar: str) -> str | None:
    """Why the engine cannot compile grammar, or write its first PROBE_STEPS bytes; None when it can."""
    matcher = llguidance.LLMatcher(_probe_vocabulary(), grammar, log_level=0, limits=quiet_limits())
    if matcher.is_error():
        return engine_reason(matcher.get_error())
    written = bytearray()
    for _ in range(PROBE_STEPS):
        allowed = int.from_bytes(matcher.compute_bitmask(), "little")
        if matcher.is_error():
            where = f"after {written.decode(errors='replace')!r}" if written else "at its first byte"
            return f"the grammar engine cannot write it: it stops {where} ({engine_reason(matcher.get_error())})"
        byte = next((b for b in PREFERRED if allowed >> b & 1), None)
        if byte is None:
            bytes_allowed = allowed & ((1 << EOS) - 1)
            if not bytes_allowed:
                return None  # complete: only the end is allowed
            byte = (bytes_allowed & -bytes_allowed).bit_length() - 1
        matcher.consume_token(byte)
        written.append(byte)
    return None


def engine_reason(message: str) -> str:
    """llguidance's message on one line ("regex parse error: (( ^ error: unclosed group"), without its state."""
    words = " ".join(message.replace("<non-verbose/>", " ").split())
    return (words[:REASON_CHARS - 3] + "...") if len(words) > REASON_CHARS else words or "the grammar engine refused it"


def quiet_limits() -> llguidance.LLParserLimits:
    """llguidance's default limits, its errors without their parser state (a client reads them)."""
    return llguidance.LLParserLimits(verbose_errors=False)


class _ByteTokens:
    """A vocabulary of the 256 bytes and an end of sequence, as llguidance's TokenizerWrapper reads one."""

    tokens = [bytes([b]) for b in range(256)] + [b"<eos>"]
    eos_token_id, bos_token_id, special_token_ids = EOS, None, [EOS]

    def __call__(self, text: bytes | str) -> list[int]:
        return list(text.encode() if isinstance(text, str) else text)


@functools.cache
def _probe_vocabulary() -> llguidance.LLTokenizer:
    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_ByteTokens()), n_vocab=EOS + 1, eos_token=EOS)
