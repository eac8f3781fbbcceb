"""The OpenAPI shapes of /v1/responses and /v1/responses/{response_id} (what api.openai.responses_requests reads)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, with_config
from typing_extensions import NotRequired, Required, TypedDict

from models_registry.api.openai.generation_bodies import (
    CHAT_CONFIG,
    MAX_MESSAGES,
    JsonObjectFormat,
    MaxTokens,
    TextFormat,
)
from models_registry.api.openai.responses_requests import IGNORED
from models_registry.api.openai.tool_schemas import MAX_TOOLS, NAME
from models_registry.api.shapes.response_schemas import OPEN
from models_registry.tasks.task_parameters import SHAPE_CONFIG


class InputText(TypedDict):
    """One text part of an input message."""

    type: Literal["input_text", "output_text", "text"]
    text: str


@with_config(SHAPE_CONFIG)
class MessageItem(TypedDict, total=False):
    """A message of the input: its role and its text (a string or text parts)."""

    type: Literal["message"]
    role: Required[Literal["user", "assistant", "system", "developer"]]
    content: Required[str | list[InputText]]
    id: str
    status: str


class ReasoningItem(TypedDict, total=False):
    """A reasoning item handed back from an earlier output: accepted, not sent to the model again."""

    type: Required[Literal["reasoning"]]
    id: str
    summary: list[Any]
    content: list[Any]
    status: str


class FunctionCallItem(TypedDict, total=False):
    """A call the model made in an earlier turn."""

    type: Required[Literal["function_call"]]
    call_id: Required[Annotated[str, Field(min_length=1)]]
    name: Required[Annotated[str, Field(min_length=1)]]
    arguments: Required[str]
    id: str
    status: str


class FunctionCallOutputItem(TypedDict, total=False):
    """The result of a call, for the model to read."""

    type: Required[Literal["function_call_output"]]
    call_id: Required[Annotated[str, Field(min_length=1)]]
    output: Required[str | list[InputText]]
    id: str
    status: str


@with_config(SHAPE_CONFIG)
class FunctionTool(TypedDict, total=False):
    """Responses' flat function tool."""

    type: Required[Literal["function"]]
    name: Required[Annotated[str, Field(pattern=NAME.pattern)]]
    description: str
    parameters: Annotated[dict[str, Any], Field(description=(
        "a JSON Schema of its arguments, within response_format's bounds (all the tools' together)"))]
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


@with_config(SHAPE_CONFIG)
class TextConfig(TypedDict, total=False):
    """text.format: chat's response_format in Responses' shape."""

    format: TextFormat | JsonObjectFormat | JsonSchemaTextFormat | None
    verbosity: Any


ResponseRequest = with_config(CHAT_CONFIG)(TypedDict("ResponseRequest", {  # type: ignore[operator]
    "model": Required[Annotated[str, Field(min_length=1, description="a text-generation model id from GET /v1/models")]],
    "input": Required[Annotated[str | Annotated[list[MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem], Field(
        min_length=1, max_length=MAX_MESSAGES)], Field(description="a user message, or items")]],
    "instructions": NotRequired[Annotated[str | None, Field(description="a system message before the input")]],
    "tools": NotRequired[Annotated[list[FunctionTool] | None, Field(max_length=MAX_TOOLS)]],
    "tool_choice": NotRequired[Literal["none", "auto", "required"] | NamedToolChoice | None],
    "parallel_tool_calls": NotRequired[bool | None],
    "text": NotRequired[TextConfig | None],
    "max_output_tokens": NotRequired[MaxTokens],
    "temperature": NotRequired[Annotated[float | None, Field(ge=0, le=2)]],
    "top_p": NotRequired[Annotated[float | None, Field(gt=0, le=1)]],
    "stream": NotRequired[Annotated[bool | None, Field(description="typed server-sent events (response.created ... "
                                                                    "response.completed)")]],
    "store": NotRequired[Annotated[bool | None, Field(description="keep it for GET and previous_response_id "
                                                                  "(default true)")]],
    "previous_response_id": NotRequired[Annotated[Annotated[str, Field(min_length=1)] | None, Field(
        description="a stored response this one continues")]],
    **{name: NotRequired[Annotated[Any, Field(description="accepted and ignored")]] for name in IGNORED},
}))
ResponseRequest.__doc__ = "OpenAI's Responses request, run as a chat generation."


@with_config(OPEN)
class ResponseUsage(TypedDict):
    """Tokens of the prompt (with any stored conversation) and of the answer."""

    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: dict[str, int]
    output_tokens_details: dict[str, int]


@with_config(OPEN)
class ResponseObject(TypedDict):
    """OpenAI's Response: message, function_call and reasoning items in output."""

    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["completed", "incomplete", "in_progress"]
    model: str
    output: list[dict[str, Any]]
    usage: ResponseUsage | None
    incomplete_details: dict[str, Any] | None
    previous_response_id: str | None
    instructions: str | None
    tools: list[dict[str, Any]]
    store: bool


class ResponseDeleted(TypedDict):
    """DELETE /v1/responses/{response_id}: the stored response is gone."""

    id: str
    object: Literal["response"]
    deleted: Literal[True]


def operations(operation: Any, errors: tuple[int, ...]) -> list[Any]:
    """The routes, as api.openapi.openapi's Operation objects (its class is passed in to avoid an import cycle)."""
    response_id = {"name": "response_id", "in": "path", "required": True, "description": "a response id (resp_...)",
                   "schema": {"type": "string"}}
    common = {"tags": ("openai",), "openai": True}
    return [
        operation("openai-responses", "post", "OpenAI-compatible Responses over a text-generation task (the chat "
                  "path: tools, text.format, reasoning items), kept for the token unless store is false.",
                  ResponseObject, errors, ResponseRequest, streams=True,
                  example={"model": "my-gpt", "input": "Hello", "max_output_tokens": 16}, **common),
        operation("openai-response", "get", "One of the token's stored responses.", ResponseObject,
                  (401, 404, 405, 500), parameters=(response_id,), **common),
        operation("openai-response", "delete", "Delete one of the token's stored responses.", ResponseDeleted,
                  (401, 404, 405, 500), parameters=(response_id,), **common),
    ]
