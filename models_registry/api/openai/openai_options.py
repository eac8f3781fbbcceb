"""OpenAI's generation fields beyond sampling: the no-op values clients send, logprobs and response_format (pure).

Every bad value is a 400 that names its field. A structured-output schema is bounded and made
canonical here (tasks.schema_bounds: cheap, on the event loop); the route compiles it off the loop
once the token is known (api.openai.structured_output), and the worker gets the compiled grammar.
"""

from __future__ import annotations

from typing import Any

from models_registry.api.pipeline.error_answers import invalid
from models_registry.tasks.json_grammar import ANY_OBJECT
from models_registry.tasks.schema_bounds import SchemaError, canonical

MAX_TOP_LOGPROBS = 20  # chat's top_logprobs (OpenAI's limit)
MAX_COMPLETION_LOGPROBS = 5  # completions' logprobs (OpenAI's limit)
# Known OpenAI fields this server does not implement: accepted when null or one of their no-op values (the
# values OpenAI's own SDKs and frameworks send), else a 400 naming the field. Chat implements the tool fields
# (api.openai.tool_schemas); completions, which has no tools, keeps them no-ops.
NO_OPS: dict[str, tuple[Any, ...]] = {
    "frequency_penalty": (0,), "presence_penalty": (0,), "logit_bias": ({},), "tools": ([],),
    "tool_choice": ("none", "auto"), "parallel_tool_calls": (True, False), "functions": ([],),
    "function_call": ("none", "auto"), "tool_prompt": (), "best_of": (1,), "echo": (False,), "suffix": ("",),
    "modalities": (["text"],), "audio": (), "prediction": (), "reasoning_effort": (), "verbosity": (),
    "web_search_options": (),
}
FORMATS = ("text", "json_object", "json_schema")


def check_no_ops(payload: dict[str, Any], skip: tuple[str, ...] = ()) -> None:
    """400 for a known unimplemented field set to anything but null or a no-op value (skip: implemented here)."""
    for name, neutrals in NO_OPS.items():
        value = None if name in skip else payload.get(name)
        if value is not None and not any(_same(value, neutral) for neutral in neutrals):
            shown = " or ".join(repr(n) for n in neutrals)
            raise invalid(f"{name!r} is not supported by this server: leave it out"
                          + (f", or send {shown}" if neutrals else ""), name)


def _same(value: Any, neutral: Any) -> bool:
    """Equal and of the same JSON type (false is not 0)."""
    return value == neutral and isinstance(value, bool) == isinstance(neutral, bool)


def read_logprobs(payload: dict[str, Any], chat: bool) -> int | None:
    """How many alternatives each token's logprob comes with; None when logprobs are not asked for.

    chat: "logprobs": true, "top_logprobs": 0-20 (which says nothing without logprobs: ignored then, so the
    document's fields stay independent). Completions: "logprobs": 0-5.
    """
    value = payload.get("logprobs")
    if chat:
        if value is not None and not isinstance(value, bool):
            raise invalid("'logprobs' must be true or false", "logprobs")
        top = _count(payload.get("top_logprobs"), "top_logprobs", MAX_TOP_LOGPROBS)
        return (top or 0) if value else None
    return _count(value, "logprobs", MAX_COMPLETION_LOGPROBS)


def _count(value: Any, name: str, high: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise invalid(f"{name!r} must be an integer from 0 to {high}", name)
    return value


def read_response_format(value: Any) -> str | None:
    """The canonical text of the schema a response_format asks for (None for text or none); 400 when it or its
    schema is bad or over the bounds (tasks.schema_bounds)."""
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind not in FORMATS:
        raise invalid('\'response_format\' must be {"type": "text"}, {"type": "json_object"} or '
                      '{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}', "response_format")
    extra = sorted(set(value) - {"type", "json_schema"} if kind == "json_schema" else set(value) - {"type"})
    if extra:
        raise invalid(f"response_format of type {kind!r} takes no {extra[0]!r}", "response_format")
    if kind == "text":
        return None
    if kind == "json_object":
        return canonical(ANY_OBJECT)
    spec = value.get("json_schema")
    if not isinstance(spec, dict) or set(spec) - {"name", "schema", "strict", "description"}:
        raise invalid("'response_format.json_schema' must be an object with name, schema, and optionally strict "
                      "and description", "response_format")
    name = spec.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= 64:
        raise invalid("'response_format.json_schema.name' is required: 1-64 characters", "response_format")
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise invalid("'response_format.json_schema.strict' must be true or false", "response_format")
    schema = spec.get("schema", ANY_OBJECT)
    if not isinstance(schema, dict):
        raise invalid("'response_format.json_schema.schema' must be a JSON Schema object", "response_format")
    try:
        return canonical(schema, strict=bool(strict))
    except SchemaError as error:
        raise invalid(f"the response_format schema cannot be used for structured output: {error}",
                      "response_format") from None
