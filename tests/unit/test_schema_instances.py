"""Whether a schema has a finite instance: a required $ref cycle has none, an optional one is fine."""

from __future__ import annotations

from typing import Any

import pytest

from models_registry.tasks.schema_instances import no_finite_instance

LIST_NODE = {"type": "object", "properties": {"v": {"type": "integer"},
                                              "next": {"anyOf": [{"$ref": "#/$defs/n"}, {"type": "null"}]}},
             "required": ["v", "next"]}


@pytest.mark.parametrize(("schema", "where"), [
    ({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}, "'#/$defs/a' at #"),
    ({"$ref": "#"}, "'#' at #"),
    ({"type": "object", "properties": {"child": {"$ref": "#"}}, "required": ["child"]}, "at #/properties/child"),
    ({"type": "array", "items": {"$ref": "#"}, "minItems": 1}, "at #/items"),
    ({"type": "array", "prefixItems": [{"type": "integer"}, {"$ref": "#"}], "minItems": 2}, "at #/prefixItems/1"),
    ({"anyOf": [{"$ref": "#/anyOf/1"}, {"$ref": "#/anyOf/0"}]}, "leads back to itself"),
    ({"allOf": [{"type": "object"}, {"$ref": "#/$defs/x"}], "$defs": {"x": {"allOf": [{"$ref": "#"}]}}}, "#/allOf/1"),
    ({"$defs": {"n": {**LIST_NODE, "properties": {**LIST_NODE["properties"], "next": {"$ref": "#/$defs/n"}}}},
      "$ref": "#/$defs/n"}, "'#/$defs/n'"),
    ({"$defs": {"a b": {"$ref": "#/$defs/a%20b"}}, "$ref": "#/$defs/a%20b"}, "'#/$defs/a%20b'"),
])
def test_a_required_cycle_has_no_finite_instance(schema: dict[str, Any], where: str) -> None:
    assert where in (no_finite_instance(schema) or "")


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"child": {"$ref": "#"}}},  # {} ends it
    {"type": ["object", "null"], "properties": {"child": {"$ref": "#"}}, "required": ["child"]},  # null ends it
    {"type": "array", "items": {"$ref": "#"}},  # [] ends it
    {"anyOf": [{"$ref": "#"}, {"type": "integer"}]},
    {"$defs": {"n": LIST_NODE}, "$ref": "#/$defs/n"},  # a linked list ends with null
    {"properties": {"child": {"$ref": "#"}}, "required": ["child"]},  # no type: a string is an instance
    {"type": "object", "properties": {"child": {"$ref": "#"}, "stop": {"const": 1}}, "required": ["stop"]},
    {"enum": [1], "allOf": [{"$ref": "#"}]},  # a literal
    {"$ref": "https://example.org/remote"}, {"$ref": "#/nowhere"},  # not followed: the engine's to judge
    {"type": "object", "properties": {"a": False}, "required": ["a"]},  # no instance, but no cycle: the engine says
    {"type": "object", "properties": {"a": {"if": {"$ref": "#"}, "then": {"$ref": "#"}}}, "required": ["a"]},
])
def test_a_schema_that_may_end_passes(schema: dict[str, Any]) -> None:
    assert no_finite_instance(schema) is None


def test_a_long_chain_of_refs_is_settled() -> None:
    """2,000 $defs each needing the next: finite when the last is a string, endless when it is the first again."""
    defs: dict[str, Any] = {f"d{i}": {"type": "object", "properties": {"n": {"$ref": f"#/$defs/d{i + 1}"}},
                                      "required": ["n"]} for i in range(2000)}
    defs["d2000"] = {"type": "string"}
    assert no_finite_instance({"$defs": defs, "$ref": "#/$defs/d0"}) is None
    defs["d2000"] = {"$ref": "#/$defs/d0"}
    assert "no finite instance" in (no_finite_instance({"$defs": defs, "$ref": "#/$defs/d0"}) or "")
