"""Whether a schema has a finite instance at all: a required $ref cycle has none (pure: no I/O).

`{"$ref": "#/$defs/a"}` with a -> b -> a, or an object that requires a property of its own type,
describes only endless JSON. llguidance compiles such a schema without complaint and then cannot
write a byte of it (or only "{"), so it is refused here, before any compute, in words a client can act
on. The check is the least fixed point of "has a finite instance" over the schema's subschemas (a
literal, a scalar type, an object whose required properties have one, an array whose required items
have one, an anyOf with a branch that has one, an allOf whose parts all have one, a $ref whose target
has one). It errs only one way: whatever it cannot judge (if/then/else, not, remote $refs, keywords it
does not know) counts as having an instance, and the engine's own checks judge the rest.
"""

from __future__ import annotations

from collections import deque
from typing import Any
from urllib.parse import unquote

from models_registry.tasks.schema_bounds import LISTS, MAPS, ONES


def no_finite_instance(schema: dict[str, Any]) -> str | None:
    """Why schema has no finite instance (a sentence naming the $ref that never ends), or None when it may have one.

    schema is a parsed canonical schema (tasks.schema_bounds): its subschemas nest at most MAX_DEPTH levels.
    """
    nodes = _Nodes(schema)
    finite = nodes.finite()
    if id(schema) in finite:
        return None
    ref = nodes.endless_ref(finite)
    if ref is None:  # no instance for another reason (a required false, say): the engine's checks say it
        return None
    return (f"it has no finite instance: the $ref {ref[1]!r} at {ref[0]} leads back to itself through required "
            "parts, so its JSON would never end (make the recursion optional)")


class _Nodes:
    """Every subschema of a schema by identity: its JSON pointer, what it depends on, what depends on it."""

    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root
        self.pointers: dict[str, Any] = {}
        self.pointer_of: dict[int, str] = {}
        self.order: list[Any] = []  # parents before children
        stack: list[tuple[Any, str]] = [(root, "#")]
        while stack:
            node, pointer = stack.pop()
            if not isinstance(node, dict) or id(node) in self.pointer_of:
                continue
            self.pointers[pointer] = node
            self.pointer_of[id(node)] = pointer
            self.order.append(node)
            stack.extend((sub, f"{pointer}/{_escape(key)}/{_escape(name)}") for key in MAPS
                         if isinstance(node.get(key), dict) for name, sub in node[key].items())
            stack.extend((sub, f"{pointer}/{key}/{n}") for key in LISTS if isinstance(node.get(key), list)
                         for n, sub in enumerate(node[key]))
            for key in ONES:
                value = node.get(key)
                if isinstance(value, list):
                    stack.extend((sub, f"{pointer}/{key}/{n}") for n, sub in enumerate(value))
                else:
                    stack.append((value, f"{pointer}/{key}"))

    def target(self, node: dict[str, Any]) -> Any:
        """The local subschema node's $ref names (None: no $ref, or one this check cannot follow)."""
        ref = node.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#"):
            return None
        return self.pointers.get("#" + unquote(ref[1:]))

    def needs(self, node: dict[str, Any]) -> list[Any]:
        """The subschemas node's finiteness is decided by."""
        props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
        found = [self.target(node), *props.values(), node.get("items"), *(_list(node, "prefixItems"))]
        found += [sub for key in ("allOf", "anyOf", "oneOf") for sub in _list(node, key)]
        return [sub for sub in found if isinstance(sub, dict)]

    def finite(self) -> set[int]:
        """The ids of the subschemas with a finite instance (each is looked at again when one it needs turns finite)."""
        needed_by: dict[int, list[Any]] = {}
        for node in self.order:
            for sub in self.needs(node):
                needed_by.setdefault(id(sub), []).append(node)
        finite: set[int] = set()
        queue = deque(reversed(self.order))  # children first: a tree is settled in one pass
        while queue:
            node = queue.popleft()
            if id(node) not in finite and _has_instance(node, self.target(node), finite):
                finite.add(id(node))
                queue.extend(needed_by.get(id(node), ()))
        return finite

    def endless_ref(self, finite: set[int]) -> tuple[str, str] | None:
        """(pointer, $ref) of the first $ref without a finite target met going down from the root."""
        seen: set[int] = set()
        stack = [self.root]
        while stack:
            node = stack.pop()
            if id(node) in seen or id(node) in finite:
                continue
            seen.add(id(node))
            if self.target(node) is not None:
                return self.pointer_of[id(node)], node["$ref"]
            stack.extend(self.needs(node))
        return None


def _has_instance(node: dict[str, Any], target: Any, finite: set[int]) -> bool:
    """Whether node has a finite instance, given the subschemas known to have one."""
    def ok(sub: Any) -> bool:
        return sub is not False and (not isinstance(sub, dict) or id(sub) in finite)

    if "const" in node or "enum" in node:
        return True  # a literal
    if target is not None and not ok(target):
        return False
    if not all(ok(sub) for sub in _list(node, "allOf")):
        return False
    if any(_list(node, key) and not any(ok(sub) for sub in _list(node, key)) for key in ("anyOf", "oneOf")):
        return False
    types = node.get("type")
    types = [types] if isinstance(types, str) else types if isinstance(types, list) and types else None
    return types is None or any(_type_has_instance(kind, node, ok) for kind in types)


def _type_has_instance(kind: Any, node: dict[str, Any], ok: Any) -> bool:
    if kind == "object":
        props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
        return all(ok(props[name]) for name in _list(node, "required") if isinstance(name, str) and name in props)
    if kind == "array":
        least = node.get("minItems", 0)
        least = least if isinstance(least, int) and not isinstance(least, bool) else 0
        prefix = _list(node, "prefixItems")
        if not all(ok(sub) for sub in prefix[:least]):
            return False
        items = node.get("items", True)
        return least <= len(prefix) or isinstance(items, list) or ok(items)
    return True  # a string, a number, a boolean, null


def _list(node: dict[str, Any], key: str) -> list[Any]:
    value = node.get(key)
    return value if isinstance(value, list) else []


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")
