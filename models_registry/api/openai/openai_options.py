"""OpenAI's generation fields beyond sampling: the no-op values clients send, logprobs and response_format (pure).

Their shapes are api.openai.generation_bodies'; this reads the validated values. A structured-output
schema is bounded and made canonical here (tasks.schema_bounds: cheap, on the event loop); the route
compiles it off the loop once the token is known (api.openai.structured_output), and the worker gets
the compiled grammar.
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


def same(value: Any, neutral: Any) -> bool:
    """Equal and of the same JSON type (false is not 0)."""
    return value == neutral and isinstance(value, bool) == isinstance(neutral, bool)


def read_logprobs(body: dict[str, Any], chat: bool) -> int | None:
    """How many alternatives each token's logprob comes with; None when logprobs are not asked for.

    chat: "logprobs": true, "top_logprobs": 0-20 (which says nothing without logprobs: ignored then, so the
    document's fields stay independent). Completions: "logprobs": 0-5.
    """
    if chat:
        return (body.get("top_logprobs") or 0) if body.get("logprobs") else None
    return body.get("logprobs")


def read_response_format(value: dict[str, Any] | None) -> str | None:
    """The canonical text of the schema a validated response_format asks for (None for text or none); 400 when
    its schema is over the bounds (tasks.schema_bounds)."""
    if value is None or value["type"] == "text":
        return None
    if value["type"] == "json_object":
        return canonical(ANY_OBJECT)
    spec = value["json_schema"]
    try:
        return canonical(spec.get("schema", ANY_OBJECT), strict=bool(spec.get("strict")))
    except SchemaError as error:
        raise invalid(f"the response_format schema cannot be used for structured output: {error}",
                      "response_format") from None
