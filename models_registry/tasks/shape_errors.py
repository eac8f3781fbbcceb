"""Pydantic's validation errors as the API's one-line 400 messages, phrased from the shapes themselves.

A shape (a TypedDict of tasks.task_parameters or api.shapes.request_schemas) fails with a list
of pydantic errors; clients get ONE clear sentence: the unknown keys and what the shape
takes, or "parameter 'x' must be an integer from 1 to 100". The phrase comes from the
key's `Says` metadata, or else from the key's JSON schema, so a bound changed in a shape
changes its message too.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Annotated, Any, Union, get_args, get_origin, get_type_hints

import typing_extensions
from pydantic import TypeAdapter, ValidationError
from typing_extensions import is_typeddict

from models_registry.core.errors import InvalidInput

Shape = Any  # a TypedDict class
_PRESENCE = {typing_extensions.Required, typing_extensions.NotRequired, typing.Required, typing.NotRequired}


@functools.cache
def adapter(shape: Shape) -> TypeAdapter[Any]:
    """The (cached) validator of a shape: building one costs about a millisecond, using it a microsecond."""
    return TypeAdapter(shape)


@functools.cache
def keys(shape: Shape) -> dict[str, Any]:
    """A shape's keys with their annotations (metadata kept, Required/NotRequired taken off)."""
    hints = get_type_hints(shape, include_extras=True)
    return {key: get_args(hint)[0] if get_origin(hint) in _PRESENCE else hint for key, hint in hints.items()}


def _says(annotation: Any) -> str | None:
    if get_origin(annotation) is Annotated:
        for meta in annotation.__metadata__:
            if hasattr(meta, "phrase") and meta.__class__.__name__ == "Says":
                return meta.phrase
    return None


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def _describe(schema: dict[str, Any]) -> str:
    """What a value of this JSON schema must be, in words."""
    options = [s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"]
    if len(options) != 1:
        return "be " + " or ".join(_describe(o).removeprefix("be ") for o in options)
    schema = options[0]
    kind = schema.get("type")
    if "enum" in schema or "const" in schema:
        return "be one of " + ", ".join(str(v) for v in schema.get("enum", [schema.get("const")]))
    if kind == "boolean":
        return "be true or false"
    if kind in ("integer", "number"):
        noun = "an integer" if kind == "integer" else "a number"
        low = (f"above {_number(schema['exclusiveMinimum'])}" if "exclusiveMinimum" in schema
               else f"from {_number(schema['minimum'])}" if "minimum" in schema else "")
        high = f"to {_number(schema['maximum'])}" if "maximum" in schema else ""
        return " ".join(part for part in ("be", noun, low, high) if part)
    if kind == "string":
        return "be a string"
    if kind == "object":
        return "be a JSON object"
    if kind == "array":
        return "be a list"
    return "be valid"


@functools.cache
def phrase(shape: Shape, key: str) -> str:
    """The predicate after "must" for a key of shape: its Says, or one derived from its schema."""
    annotation = keys(shape)[key]
    return _says(annotation) or _describe(TypeAdapter(annotation).json_schema())


def nested_shape(annotation: Any) -> Shape | None:
    """The TypedDict a key's annotation holds (through Annotated and unions), if any."""
    if is_typeddict(annotation):
        return annotation
    origin = get_origin(annotation)
    if origin is Annotated:
        return nested_shape(get_args(annotation)[0])
    if origin in (Union, types.UnionType, typing.Union):
        for arg in get_args(annotation):
            found = nested_shape(arg)
            if found is not None:
                return found
    return None


def unknown_keys(errors: list[Any], depth: int = 0) -> list[str]:
    """The keys a shape does not declare, at one depth of the location."""
    return sorted({str(e["loc"][depth]) for e in errors if e["type"] == "extra_forbidden" and len(e["loc"]) == depth + 1})


def explain_parameters(shape: Shape, what: str, error: ValidationError, hint: str = "") -> InvalidInput:
    """One 400 for a failed parameters shape: unknown keys first, then the first bad value."""
    return _explain(shape, what, error.errors(), hint)


def _explain(shape: Shape, what: str, errors: list[Any], hint: str) -> InvalidInput:
    unknown = unknown_keys(errors)
    if unknown:
        allowed = ", ".join(sorted(keys(shape))) or "none"
        extra = hint.format(unknown=unknown) if hint else ""
        return InvalidInput(f"{what} does not take parameter(s) {', '.join(unknown)}; it takes: {allowed}{extra}")
    first = errors[0]
    if not first["loc"]:
        return InvalidInput(f"'{what}' must be a JSON object")
    key = str(first["loc"][0])
    inner = nested_shape(keys(shape).get(key))
    deeper = [dict(e, loc=e["loc"][1:]) for e in errors if len(e["loc"]) > 1 and e["loc"][0] == key]
    if inner is not None and deeper and deeper[0]["loc"] and isinstance(deeper[0]["loc"][0], str) \
            and deeper[0]["loc"][0] in set(keys(inner)) | set(unknown_keys(deeper)):
        return _explain(inner, key, deeper, "")
    return InvalidInput(f"parameter {key!r} must {phrase(shape, key)}")


def json_path(error: Any, payload: Any) -> str:
    """Where a pydantic error is, as a JSON path of the payload (messages[0].content), read along the payload
    itself so that pydantic's names of union members are left out."""
    path, node = "", payload
    for n, part in enumerate(error["loc"]):
        if isinstance(part, int) and isinstance(node, list) and part < len(node):
            path, node = f"{path}[{part}]", node[part]
        elif isinstance(part, str) and isinstance(node, dict) and (part in node or (
                error["type"] == "missing" and n == len(error["loc"]) - 1)):
            path, node = f"{path}.{part}" if path else part, node.get(part)
    return path


def deepest(errors: list[Any], key: str, payload: Any) -> tuple[str, str]:
    """The path and pydantic's words of the deepest error under a top-level key (the most precise one)."""
    error = max((e for e in errors if e["loc"][:1] == (key,)), key=lambda e: len(json_path(e, payload)))
    return json_path(error, payload), error["msg"]


def detail(errors: list[Any], key: str, payload: Any) -> str:
    """What failed inside a list or an object under key, as " (path: words)"; nothing for a top-level value."""
    path, words = deepest(errors, key, payload)
    return f" ({path}: {words})" if path != key else ""
