"""Structured output's request side: response_format read and bounded, its schema compiled or refused before compute."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from models_registry.api.openai.generation_requests import read, worker_parameters
from models_registry.api.openai.structured_output import GrammarCompiles
from models_registry.core.errors import InvalidInput
from models_registry.tasks.json_grammar import compile_canonical, compile_schema, engine_reason, probe
from models_registry.tasks.schema_bounds import SchemaError, canonical, closed

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}
# The round-five attacks that answered 200 "stop" over invalid JSON (issue 50): now each is refused.
REF_LOOP = {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}
SELF_REQUIRED = {"type": "object", "properties": {"child": {"$ref": "#"}}, "required": ["child"]}
# Within the bounds, after a free string: a choice between two objects of 300 optional properties, a parser row
# of 2,414 items (llguidance's hold 2,000).
WIDE_AFTER_A_STRING = {"type": "object", "properties": {
    "s": {"type": "string", "maxLength": 2},
    "x": {"anyOf": [{"type": "object", "properties": {f"b{j}_{i}": {"type": "integer"} for i in range(300)}}
                    for j in range(2)]}},
    "required": ["s", "x"], "additionalProperties": False}


def json_schema(schema: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, **extra}}


def test_the_grammar_travels_to_the_worker_with_each_choice() -> None:
    wanted = read({**CHAT, "n": 2, "response_format": json_schema(PERSON, strict=True)}, chat=True)
    assert wanted.schema == canonical(PERSON, strict=True) and wanted.grammar is None  # compiled by the route
    wanted = dataclasses.replace(wanted, grammar=compile_canonical(wanted.schema))
    assert wanted.grammar and all(worker_parameters(wanted, i)["grammar"] == wanted.grammar for i in range(2))
    assert read({**CHAT, "response_format": {"type": "json_object"}}, chat=True).schema == '{"type":"object"}'
    assert read({**CHAT, "response_format": {"type": "text"}}, chat=True).schema is None
    assert "grammar" not in worker_parameters(read(CHAT, chat=True), 0)
    assert read({"model": "m", "prompt": "a", "response_format": {"type": "json_object"}}, chat=False).schema


@pytest.mark.parametrize(("schema", "words"), [
    ({"type": "frobnicate"}, "Invalid type"), ({"$ref": "#/nope"}, "does not exist"),
    ({"type": "string", "format": "weird"}, "Unknown format"),
    ({"type": "string", "pattern": "(("}, "regex parse error: .* unclosed group"),
    ({"not": {"type": "string"}}, "Unimplemented"),
    (REF_LOOP, "no finite instance: the \\$ref '#/\\$defs/a' at # leads back to itself"),
    (SELF_REQUIRED, "no finite instance: the \\$ref '#' at #/properties/child"),
    (WIDE_AFTER_A_STRING, "cannot write it: it stops after '{\"s\":\"\",' .*row has 2414 items"),
])
def test_a_schema_the_engine_cannot_use_is_a_400_that_says_why(schema: dict[str, Any], words: str) -> None:
    with pytest.raises(SchemaError, match=words):
        compile_schema(schema)
    text = read({**CHAT, "response_format": json_schema(schema)}, chat=True).schema
    assert text is not None
    with pytest.raises(InvalidInput, match=f"cannot be used for structured output: .*{words}") as caught:
        asyncio.run(GrammarCompiles().grammar(text))
    assert caught.value.param == "response_format"  # type: ignore[attr-defined]


def test_the_probe_passes_what_the_engine_can_write_and_stops_at_what_it_cannot() -> None:
    import llguidance

    from models_registry.tasks.json_grammar import COMPACT

    def grammar(schema: dict[str, Any]) -> str:
        return llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=COMPACT)

    assert probe(grammar(PERSON)) is None and probe(grammar({"const": "x"})) is None  # complete within the steps
    assert probe(grammar({"type": "string", "minLength": 500})) is None  # still going at its last step
    assert "at its first byte (NoExtensionBias)" in (probe(grammar(REF_LOOP)) or "")
    optional_loop = {"type": "object", "properties": {"a": {"$ref": "#/$defs/l"}}, "$defs": {"l": {"$ref": "#/$defs/l"}},
                     "additionalProperties": False}  # has an instance ({}), but the engine takes "a" and is stuck
    assert "it stops after '{\"a\":'" in (probe(grammar(optional_loop)) or "")


def test_the_engines_words_are_one_line_without_its_state() -> None:
    assert engine_reason("regex parse error:\n    ((\n     ^\nerror: unclosed group") == \
        "regex parse error: (( ^ error: unclosed group"
    assert engine_reason("NoExtensionBias\n<non-verbose/>") == "NoExtensionBias"
    assert len(engine_reason("x" * 5000)) == 300


@pytest.mark.parametrize("value", [
    "json", {"type": "yaml"}, {"type": "text", "json_schema": {}}, {"type": "json_schema"},
    {"type": "json_schema", "json_schema": {"schema": PERSON}}, {"type": "json_schema", "json_schema": {
        "name": "x" * 65, "schema": PERSON}}, json_schema(PERSON, strict="yes"), json_schema([1]),
    json_schema(PERSON, bogus=1), json_schema({"enum": list(range(1001))}),
])
def test_bad_response_formats_name_the_field(value: Any) -> None:
    with pytest.raises(InvalidInput) as caught:  # the shape (api.openai.generation_bodies), then the bounds
        read({**CHAT, "response_format": value}, chat=True)
    assert caught.value.param == "response_format"  # type: ignore[attr-defined]


def test_strict_closes_object_schemas_that_say_nothing_of_other_properties() -> None:
    schema = {"type": "object", "properties": {"properties": {"type": "object", "properties": {"a": {}}},
                                               "open": {"type": "object", "properties": {},
                                                        "additionalProperties": True}},
              "$defs": {"d": {"properties": {"x": {}}}}, "anyOf": [{"properties": {"y": {}}}],
              "items": {"properties": {"z": {}}}}
    done = closed(schema)
    assert done["additionalProperties"] is False
    assert done["properties"]["properties"]["additionalProperties"] is False  # a property named "properties"
    assert "additionalProperties" not in done["properties"]  # ... is not taken for a schema
    assert done["properties"]["open"]["additionalProperties"] is True
    assert done["$defs"]["d"]["additionalProperties"] is False and done["anyOf"][0]["additionalProperties"] is False
    assert done["items"]["additionalProperties"] is False and "additionalProperties" not in schema
    assert compile_schema(PERSON, strict=True) != compile_schema(PERSON)
