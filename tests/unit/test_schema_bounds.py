"""A response_format schema's bounds, checked before any compile, and its canonical text (the compile cache's key)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from models_registry.tasks import schema_bounds
from models_registry.tasks.schema_bounds import SchemaError, canonical


def obj(count: int, prefix: str = "p") -> dict[str, Any]:
    return {"type": "object", "properties": {f"{prefix}{i}": {"type": "integer"} for i in range(count)}}


def nested(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(levels - 1):
        schema = {"type": "array", "items": schema}
    return schema


# (schema at a bound: accepted, the same one step over it: refused, words of the refusal)
AT_AND_OVER = [
    ({"enum": list(range(1000))}, {"enum": list(range(1001))}, "an enum has 1,001 values; at most 1,000 in one enum"),
    ({"anyOf": [{"enum": list(range(1000))}] * 5}, {"anyOf": [{"enum": list(range(1000))}] * 5 + [{"enum": [1]}]},
     "more than 5,000 values in all"),
    (obj(400), obj(401), "an object schema lists 401 properties; at most 400 in one object"),
    ({"type": "object", "properties": {f"o{j}": obj(332) for j in range(3)}},  # 3 + 3 x 332 + 1
     {"type": "object", "properties": {**{f"o{j}": obj(332) for j in range(3)}, "one": {}, "two": {}}},
     "more than 1,000 properties in all"),
    ({"anyOf": [{"const": i} for i in range(500)]}, {"anyOf": [{"const": i} for i in range(501)]},
     "more than 500 branches in all"),
    ({"anyOf": [{"oneOf": [{"const": i}] * 9} for i in range(50)]},  # 50 + 450 branches, nested ones counted too
     {"anyOf": [{"oneOf": [{"const": i}] * 10} for i in range(50)]}, "anyOf and oneOf lists have more than 500"),
    ({"anyOf": [{"enum": [{"k": i} for i in range(499)] + ["a", 1, None]}]},  # objects and arrays are branches
     {"anyOf": [{"enum": [[i] for i in range(500)]}]}, "more than 500 branches in all \\(an enum value"),
    (nested(32), nested(33), "nests subschemas more than 32 levels deep"),
    ({"type": "string", "description": "x" * 99_966}, {"type": "string", "description": "x" * 99_967},
     "100,001 bytes as compact JSON; at most 100,000"),
]


@pytest.mark.parametrize(("at", "over", "words"), AT_AND_OVER)
def test_each_bound_takes_its_limit_and_refuses_one_more(at: dict[str, Any], over: dict[str, Any], words: str) -> None:
    canonical(at)
    with pytest.raises(SchemaError, match=words):
        canonical(over)


def test_issue_50s_schemas_are_refused_before_any_compile() -> None:
    """A 100,000-value enum, 20,000 properties, an anyOf of 5,000 objects: refused by a bound, not compiled."""
    for schema in ({"enum": [f"value{i}" for i in range(100_000)]}, obj(20_000),
                   {"anyOf": [{"type": "object", "properties": {f"k{i}": {"type": "integer"}}, "required": [f"k{i}"]}
                              for i in range(5000)]}):
        with pytest.raises(SchemaError, match="bytes as compact JSON; at most 100,000"):
            canonical(schema)
    # The same shapes small enough in bytes meet the bound of their own kind.
    with pytest.raises(SchemaError, match="an enum has 20,000 values"):
        canonical({"enum": [0] * 20_000})
    with pytest.raises(SchemaError, match="lists 5,000 properties; at most 400 in one object"):
        canonical({"properties": {str(i): {} for i in range(5_000)}})
    with pytest.raises(SchemaError, match="more than 500 branches"):
        canonical({"anyOf": [{}] * 5_000})


def test_the_key_is_the_same_for_spacing_and_key_order() -> None:
    schema = {"type": "object", "required": ["b"], "properties": {"b": {"type": "string", "maxLength": 3},
                                                                  "a": {"minimum": 0, "type": "integer"}},
              "$defs": {"z": {"type": "null"}, "y": {"type": "boolean"}}}
    same = json.loads(json.dumps({"$defs": {"y": {"type": "boolean"}, "z": {"type": "null"}},
                                  "properties": {"b": {"maxLength": 3, "type": "string"},
                                                 "a": {"type": "integer", "minimum": 0}},
                                  "required": ["b"], "type": "object"}, indent=4))
    assert canonical(schema) == canonical(same)
    assert json.loads(canonical(schema)) == schema and " " not in canonical(schema)  # the same schema, compact


@pytest.mark.parametrize("change", [
    lambda s: {**s, "properties": dict(reversed(list(s["properties"].items())))},  # the answer's key order
    lambda s: {**s, "properties": {"c" if k == "b" else k: v for k, v in s["properties"].items()}},
    lambda s: {**s, "required": ["a"]},
])
def test_the_key_differs_for_what_the_grammar_depends_on(change: Any) -> None:
    schema = {"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}, "required": ["b"]}
    assert canonical(change(schema)) != canonical(schema)
    assert canonical(schema, strict=True) != canonical(schema)


def test_values_are_kept_as_sent_and_only_schemas_are_sorted() -> None:
    schema = {"enum": [{"z": 1, "a": 2}], "default": {"y": 1, "b": 2}, "const": [3, 1, 2]}
    text = canonical(schema)
    assert text.index('"z"') < text.index('"a"') and text.index('"y"') < text.index('"b"') and "[3,1,2]" in text


def test_the_bounds_are_what_the_docs_say() -> None:
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "generation.md").read_text()
    for name in ("MAX_SCHEMA_BYTES", "MAX_DEPTH", "MAX_OBJECT_PROPERTIES", "MAX_PROPERTIES", "MAX_ENUM_VALUES",
                 "MAX_ALL_ENUM_VALUES", "MAX_BRANCHES"):
        assert f"{getattr(schema_bounds, name):,}" in docs, name
