"""OpenAI's Responses body as a pydantic shape: POST /v1/responses validates with it, the OpenAPI document shows it.

A body that passes is translated into a chat body (api.openai.responses_requests), whose
reader adds what no shape says (tools' names distinct, a named tool_choice among them, the
schema bounds). A failed shape is ONE 400 naming the Responses field (`explain`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, ValidationError, with_config
from typing_extensions import NotRequired, Required, TypedDict

from models_registry.api.openai.generation_bodies import (
    CHAT_CONFIG,
    LENIENT,
    MAX_MESSAGES,
    JsonObjectFormat,
    MaxTokens,
    TextFormat,
    ToolParameters,
)
from models_registry.api.openai.tool_schemas import MAX_TOOLS, NAME
from models_registry.api.pipeline.error_answers import invalid
from models_registry.core.errors import InvalidInput
from models_registry.tasks.parameter_types import SHAPE_CONFIG, Says
from models_registry.tasks.shape_errors import adapter, deepest, detail, phrase, unknown_keys

# Bookkeeping and hints: accepted, no effect here (metadata is echoed).
IGNORED = ("metadata", "user", "service_tier", "prompt_cache_key", "safety_identifier", "truncation", "reasoning")
ITEMS = "a message, a function_call, a function_call_output or a reasoning item (only text content is supported)"
# Items and parts are lenient (LENIENT): clients hand back a previous response's output, with its ids,
# statuses and annotations.


@with_config(LENIENT)
class InputText(TypedDict):
    """One text part of an input message."""

    type: Literal["input_text", "output_text", "text"]
    text: str


@with_config(LENIENT)
class MessageItem(TypedDict, total=False):
    """A message of the input: its role and its text (a string or text parts)."""

    type: Literal["message"]
    role: Required[Literal["user", "assistant", "system", "developer"]]
    content: Required[str | list[InputText]]
    id: str
    status: str


@with_config(LENIENT)
class ReasoningItem(TypedDict, total=False):
    """A reasoning item handed back from an earlier output: accepted, not sent to the model again."""

    type: Required[Literal["reasoning"]]
    id: str
    summary: list[Any]
    content: list[Any]
    status: str


@with_config(LENIENT)
class FunctionCallItem(TypedDict, total=False):
    """A call the model made in an earlier turn."""

    type: Required[Literal["function_call"]]
    call_id: Required[Annotated[str, Field(min_length=1)]]
    name: Required[Annotated[str, Field(min_length=1)]]
    arguments: Required[str]
    id: str
    status: str


@with_config(LENIENT)
class FunctionCallOutputItem(TypedDict, total=False):
    """The result of a call, for the model to read."""

    type: Required[Literal["function_call_output"]]
    call_id: Required[Annotated[str, Field(min_length=1)]]
    output: Required[str | list[InputText]]
    id: str
    status: str


def _kind(item: Any) -> str | None:
    """An item's type: a message when it says none (as OpenAI reads one)."""
    return item.get("type", "message") if isinstance(item, dict) else None


# Told apart by their type: a 400 speaks of the item the client sent.
Item = Annotated[Annotated[MessageItem, Tag("message")] | Annotated[FunctionCallItem, Tag("function_call")]
                 | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
                 | Annotated[ReasoningItem, Tag("reasoning")],
                 Discriminator(_kind, custom_error_type="item_type",
                               custom_error_message="the type of an item is message (the default), function_call, "
                                                    "function_call_output or reasoning")]


@with_config(SHAPE_CONFIG)
class FunctionTool(TypedDict, total=False):
    """Responses' flat function tool."""

    type: Required[Literal["function"]]
    name: Required[Annotated[str, Field(pattern=NAME.pattern)]]
    description: str | None
    parameters: ToolParameters
    strict: bool | None


@with_config(SHAPE_CONFIG)
class NamedToolChoice(TypedDict):
    """One function the answer must call."""

    type: Literal["function"]
    name: str


@with_config(SHAPE_CONFIG)
class JsonSchemaTextFormat(TypedDict, total=False):
    """JSON that follows a schema (Responses' flat json_schema format)."""

    type: Required[Literal["json_schema"]]
    name: Required[Annotated[str, Field(min_length=1, max_length=64)]]
    schema: dict[str, Any]
    strict: bool | None
    description: str


TEXT_FORMAT = ('be {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", "name": ..., '
               '"schema": {...}}')


@with_config(SHAPE_CONFIG)
class TextConfig(TypedDict, total=False):
    """text.format: chat's response_format in Responses' shape."""

    format: Annotated[TextFormat | JsonObjectFormat | JsonSchemaTextFormat, Field(discriminator="type")] | None
    verbosity: Any


ResponseRequest = with_config(CHAT_CONFIG)(TypedDict("ResponseRequest", {  # type: ignore[operator]
    "model": Required[Annotated[str, Field(min_length=1, description="a text-generation model id from "
                                                                     "GET /v1/models")]],
    "input": Required[Annotated[str | Annotated[list[Item], Field(min_length=1, max_length=MAX_MESSAGES)], Field(
        description="a user message, or items")]],
    "instructions": NotRequired[Annotated[str | None, Field(description="a system message before the input")]],
    "tools": NotRequired[Annotated[list[FunctionTool] | None, Field(max_length=MAX_TOOLS), Says(
        f'be a list of at most {MAX_TOOLS} functions, {{"type": "function", "name", "description", "parameters" '
        "(a JSON Schema object), \"strict\"}, only functions are supported, each name 1-64 letters, digits, '_', "
        "'-' or '.'")]],
    "tool_choice": NotRequired[Annotated[Literal["none", "auto", "required"] | NamedToolChoice | None, Says(
        'be "none", "auto", "required" or {"type": "function", "name": ...}')]],
    "parallel_tool_calls": NotRequired[bool | None],
    "text": NotRequired[Annotated[TextConfig | None, Says('be an object like {"format": {"type": "text"}}')]],
    "max_output_tokens": NotRequired[MaxTokens],
    "temperature": NotRequired[Annotated[float | None, Field(ge=0, le=2)]],
    "top_p": NotRequired[Annotated[float | None, Field(gt=0, le=1), Says("be a number above 0, up to 1")]],
    "stream": NotRequired[Annotated[bool | None, Field(description="typed server-sent events (response.created ... "
                                                                    "response.completed)")]],
    "store": NotRequired[Annotated[bool | None, Field(description="keep it for GET and previous_response_id "
                                                                  "(default true)")]],
    "previous_response_id": NotRequired[Annotated[Annotated[str, Field(min_length=1)] | None, Field(
        description="a stored response this one continues"), Says("be a response id (resp_...)")]],
    **{name: NotRequired[Annotated[Any, Field(description="accepted and ignored")]] for name in IGNORED},
}))
ResponseRequest.__doc__ = "OpenAI's Responses request, run as a chat generation."
ADAPTER = adapter(ResponseRequest)  # built once


def validate(payload: Any) -> dict[str, Any]:
    """payload checked against the Responses shape; the one 400 naming its field when it fails."""
    try:
        return ADAPTER.validate_python(payload)
    except ValidationError as error:
        raise explain(payload, error) from None


def explain(payload: Any, error: ValidationError) -> InvalidInput:
    """The one 400 for a body that failed the shape, naming the Responses field: unknown keys first."""
    if not isinstance(payload, dict):
        return invalid('request body must be a JSON object like {"model": "...", "input": "..."}', None)
    errors = error.errors(include_url=False)
    unknown = unknown_keys(errors)
    if unknown:
        return invalid(f"unrecognized request argument(s): {', '.join(unknown)}", unknown[0])
    field = str(errors[0]["loc"][0])
    value, (path, _) = payload.get(field), deepest(errors, field, payload)
    if field == "model":
        return invalid("'model' is required: a model id from GET /v1/models", "model")
    if field == "input" and isinstance(value, list) and len(value) > MAX_MESSAGES:
        return invalid(f"{len(value)} input items: at most {MAX_MESSAGES}", "input")
    if field == "input" and isinstance(value, list) and value:
        where = path[:path.index("]") + 1] if "[" in path else field
        return invalid(f"{where} must be {ITEMS}" + detail(errors, field, payload), "input")
    if field == "input":
        return invalid("'input' is required: a string or a non-empty list of items", "input")
    if path == "text.format" or path.startswith("text.format."):
        return invalid(f"'text.format' must {TEXT_FORMAT}" + detail(errors, field, payload), "text.format")
    return invalid(f"{field!r} must {phrase(ResponseRequest, field)}" + detail(errors, field, payload), field)
