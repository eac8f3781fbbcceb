"""The OpenAPI answers of /v1/responses and /v1/responses/{response_id}; the body is api.openai.responses_bodies'."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import with_config
from typing_extensions import TypedDict

from models_registry.api.openai.responses_bodies import ResponseRequest
from models_registry.api.shapes.response_schemas import OPEN


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
