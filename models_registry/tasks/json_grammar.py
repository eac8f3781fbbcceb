"""Structured output: a JSON schema compiled into the grammar a generation is constrained by (llguidance).

The web compiles and checks the grammar (no tokenizer needed), so a schema the engine
cannot take is a 400 before anything is queued; the worker only instantiates it for its
tokenizer (inference.grammar_mask). The JSON is compact: no whitespace between tokens
and "," / ":" as separators, so a model cannot spend its tokens on spaces or newlines.
Why llguidance: docs/generation.md (the per-step mask cost measured against xgrammar and
outlines-core on a 50,257-token vocabulary).
"""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

import llguidance

COMPACT = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}
ANY_OBJECT: dict[str, Any] = {"type": "object"}  # OpenAI's json_object: a JSON object, whatever its keys


class SchemaError(ValueError):
    """The schema cannot be compiled; the message says why (the engine's own words)."""


def compile_schema(schema: dict[str, Any], strict: bool = False) -> str:
    """The grammar (llguidance's serialized form) of schema; SchemaError when the engine cannot take it.

    strict (OpenAI's json_schema.strict): an object schema that does not say otherwise takes
    no properties beyond those it lists, as OpenAI's strict mode requires them to be declared.
    """
    if not isinstance(schema, dict):
        raise SchemaError("the schema must be a JSON object")
    return _compiled(json.dumps(schema), strict)  # keys in order: an object's properties come in the schema's order


@functools.lru_cache(maxsize=256)  # a service sends the same schema with every request
def _compiled(text: str, strict: bool) -> str:
    schema = json.loads(text)
    if strict:
        schema = closed(schema)
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=COMPACT)
    except ValueError as error:
        raise SchemaError(str(error)) from None
    problem = llguidance.LLMatcher.validate_grammar(grammar)
    if problem:
        raise SchemaError(problem.strip().splitlines()[0] if problem.strip() else problem)
    return grammar


MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")  # name -> schema
LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")  # [schema]
ONES = ("items", "additionalProperties", "contains", "not", "if", "then", "else")  # schema (items: or a list)


def closed(schema: Any) -> Any:
    """schema with "additionalProperties": false on every object schema that lists properties and says nothing."""
    schema = copy.deepcopy(schema)
    stack = [schema]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        if "properties" in node and "additionalProperties" not in node and "patternProperties" not in node:
            node["additionalProperties"] = False
        for key in MAPS:
            if isinstance(node.get(key), dict):
                stack.extend(node[key].values())
        for key in LISTS:
            if isinstance(node.get(key), list):
                stack.extend(node[key])
        for key in ONES:
            value = node.get(key)
            stack.extend(value if isinstance(value, list) else [value])
    return schema
