"""A response_format schema bounded before anything compiles it, and its canonical text (pure: no I/O).

The bounds are cheap structural limits, checked in one pass on the web's event loop that stops at the
first one exceeded. What a compile costs grows with them (llguidance 1.9.1, one quiet core of a 2-core
machine, the web's compile and a worker's for a 50,257-token vocabulary alike): one object of 1,000
optional properties 90 ms, of 2,000 0.4 s, of 5,000 2.7 s; five objects of 400 optional ones 160 ms; an
anyOf of 1,000 objects 70-175 ms; 5,000 enum values that are objects 330 ms, strings or numbers 12 ms.
At the bounds a compile takes about 0.1 s (0.2 s where several meet). An anyOf of more than 2,000
branches cannot be generated at all (llguidance's rows hold 2,000 items). OpenAI's structured outputs
have limits of the same kind (5,000 properties, 10 levels of nesting, 1,000 enum values).

The canonical text is what the grammar is compiled from and what its caches are keyed on: compact JSON
with every schema object's keys sorted, except the names in `properties`, whose order is the order of
the answer's keys; strict mode's closing applied. Schemas that differ only in spacing or key order share
one compile; a different property name, property order or strictness is a different grammar.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

MAX_SCHEMA_BYTES = 100_000  # as compact JSON
MAX_DEPTH = 32  # subschemas nested in subschemas
# In one object schema: optional ones cost with the square of their number, and llguidance cannot write an
# object of 499 optional properties at all (its parser row after "{" holds 2,003 items, over its 2,000).
MAX_OBJECT_PROPERTIES = 400
MAX_PROPERTIES = 1_000  # in every object schema together
MAX_ENUM_VALUES = 1_000  # in one enum
MAX_ALL_ENUM_VALUES = 5_000  # in every enum together
MAX_BRANCHES = 500  # in every anyOf and oneOf together, and enum values that are objects or arrays

MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")  # name -> schema
LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")  # [schema]
ONES = ("items", "additionalProperties", "contains", "not", "if", "then", "else",
        "propertyNames", "unevaluatedItems", "unevaluatedProperties")  # schema (items: or a list of them)
CHOICES = ("anyOf", "oneOf")


class SchemaError(ValueError):
    """The schema cannot be used for structured output; the message says why (a bound, or the engine's words)."""


def canonical(schema: Any, strict: bool = False) -> str:
    """The schema's canonical text (see above); SchemaError naming the first bound it exceeds.

    strict (OpenAI's json_schema.strict): an object schema that lists properties and says nothing of
    others takes no others, as OpenAI's strict mode requires every property to be declared.
    """
    if not isinstance(schema, dict):
        raise SchemaError("the schema must be a JSON object")
    try:
        size = len(orjson.dumps(schema))
    except TypeError:  # nested past orjson's 255 levels (a request body cannot be: it nests 32 at most)
        raise SchemaError(f"it nests subschemas more than {MAX_DEPTH} levels deep") from None
    if size > MAX_SCHEMA_BYTES:
        raise SchemaError(f"it is {size:,} bytes as compact JSON; at most {MAX_SCHEMA_BYTES:,}")
    return orjson.dumps(_Walk(strict).schema(schema, 1)).decode()


def closed(schema: Any) -> Any:
    """schema as strict mode compiles it: "additionalProperties": false wherever it lists properties and says nothing."""
    return orjson.loads(canonical(schema, strict=True))


@dataclass
class _Walk:
    """One pass over a schema: the counts so far against the bounds, and the canonical copy it builds."""

    strict: bool
    properties: int = 0
    enum_values: int = 0
    branches: int = 0

    def schema(self, node: Any, depth: int) -> Any:
        """The canonical copy of the subschema node at depth."""
        if not isinstance(node, dict):
            return node  # true, false, or junk the engine refuses in its own words
        if depth > MAX_DEPTH:
            raise SchemaError(f"it nests subschemas more than {MAX_DEPTH} levels deep")
        copy: dict[str, Any] = {}
        for key in sorted(node):
            value = node[key]
            if key == "properties" and isinstance(value, dict):
                self._count_properties(len(value))
                copy[key] = {name: self.schema(sub, depth + 1) for name, sub in value.items()}  # order kept
            elif key in MAPS and isinstance(value, dict):
                copy[key] = {name: self.schema(value[name], depth + 1) for name in sorted(value)}
            elif key in LISTS and isinstance(value, list):
                if key in CHOICES:
                    self._count_branches(len(value))
                copy[key] = [self.schema(sub, depth + 1) for sub in value]
            elif key in ONES:
                copy[key] = ([self.schema(sub, depth + 1) for sub in value] if isinstance(value, list)
                             else self.schema(value, depth + 1))
            else:
                if key == "enum" and isinstance(value, list):
                    self._count_enum(len(value))
                    # An object or array value is an alternative of the grammar as an anyOf branch is (65 us each
                    # to compile, measured, where a string's or a number's is 2 us: they go to the lexer).
                    self._count_branches(sum(isinstance(v, dict | list) for v in value))
                copy[key] = value  # a value (enum, const, default, required, ...), not a schema: as sent
        if self.strict and "properties" in copy and "additionalProperties" not in copy \
                and "patternProperties" not in copy:
            copy["additionalProperties"] = False
            copy = dict(sorted(copy.items()))
        return copy

    def _count_properties(self, count: int) -> None:
        self.properties += count
        if count > MAX_OBJECT_PROPERTIES:
            raise SchemaError(f"an object schema lists {count:,} properties; at most {MAX_OBJECT_PROPERTIES:,} "
                              "in one object")
        if self.properties > MAX_PROPERTIES:
            raise SchemaError(f"it lists more than {MAX_PROPERTIES:,} properties in all")

    def _count_enum(self, count: int) -> None:
        self.enum_values += count
        if count > MAX_ENUM_VALUES:
            raise SchemaError(f"an enum has {count:,} values; at most {MAX_ENUM_VALUES:,} in one enum")
        if self.enum_values > MAX_ALL_ENUM_VALUES:
            raise SchemaError(f"its enums have more than {MAX_ALL_ENUM_VALUES:,} values in all")

    def _count_branches(self, count: int) -> None:
        self.branches += count
        if self.branches > MAX_BRANCHES:
            raise SchemaError(f"its anyOf and oneOf lists have more than {MAX_BRANCHES:,} branches in all (an enum "
                              "value that is an object or array counts as one)")
