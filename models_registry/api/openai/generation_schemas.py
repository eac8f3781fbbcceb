"""The OpenAPI answers of /v1/chat/completions and /v1/completions; their bodies are api.openai.generation_bodies'."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, with_config
from typing_extensions import NotRequired, TypedDict

from models_registry.api.openai.generation_bodies import ChatCompletionRequest, CompletionRequest
from models_registry.api.shapes.response_schemas import OPEN


class FunctionCall(TypedDict):
    """A call's function: its name and its arguments as JSON text."""

    name: str
    arguments: str


@with_config(OPEN)
class GenerationUsage(TypedDict):
    """Tokens: each prompt once, every generated token (what the token is charged)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


@with_config(OPEN)
class AnswerToolCall(TypedDict):
    """A call the model made."""

    id: str
    type: Literal["function"]
    function: FunctionCall


@with_config(OPEN)
class AssistantMessage(TypedDict):
    """The generated message."""

    role: Literal["assistant"]
    content: str | None
    tool_calls: NotRequired[Annotated[list[AnswerToolCall], Field(description=(
        "the calls the model made (content null then, unless it also wrote text); finish_reason tool_calls"))]]
    reasoning_content: NotRequired[Annotated[str, Field(description=(
        "a reasoning model's thinking (its <think> block, as the task's reasoning_format says), apart from content; "
        "absent where the model did not reason. Its tokens count in usage.completion_tokens and max_tokens"))]]


@with_config(OPEN)
class TopLogprob(TypedDict):
    """An alternative to a generated token."""

    token: str
    logprob: float
    bytes: list[int]


@with_config(OPEN)
class TokenLogprob(TypedDict):
    """A generated token: its text (bytes escaped when part of a character), logprob, bytes, alternatives."""

    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TopLogprob]


@with_config(OPEN)
class ChatLogprobs(TypedDict):
    """With "logprobs": true."""

    content: list[TokenLogprob]
    refusal: None


@with_config(OPEN)
class ChatChoice(TypedDict):
    """One choice of a chat answer."""

    index: int
    message: AssistantMessage
    logprobs: ChatLogprobs | None
    finish_reason: Literal["stop", "length", "tool_calls"]


@with_config(OPEN)
class ChatCompletion(TypedDict):
    """OpenAI's chat completion."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: GenerationUsage


@with_config(OPEN)
class CompletionLogprobs(TypedDict):
    """With "logprobs": N; top_logprobs holds the N most likely and the token itself."""

    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


@with_config(OPEN)
class CompletionChoice(TypedDict):
    """One choice of a completions answer."""

    index: int
    text: str
    logprobs: CompletionLogprobs | None
    finish_reason: Literal["stop", "length"]


@with_config(OPEN)
class Completion(TypedDict):
    """OpenAI's completion."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: GenerationUsage


CHUNKS = ('With "stream": true: `data: {"id", "object": "chat.completion.chunk" (or "text_completion"), "created", '
          '"model", "choices": [{"index", "delta": {"role"?, "content"} (or "text"), "finish_reason"}]}` events '
          '(a reasoning model\'s thinking first, as "delta": {"reasoning_content"}; a tool call, once whole, as '
          '"delta": {"tool_calls": [{"index", "id", "type", "function": {"name", "arguments": ""}}]} then its '
          'arguments), '
          'with stream_options.include_usage a last chunk with "usage" and no choices, then `data: [DONE]`; an '
          'error after the first byte is a `data: {"error": {...}}` event.')


def operations(operation: Any, errors: tuple[int, ...]) -> list[Any]:
    """The two routes, as api.openapi.openapi's Operation objects with errors (api.openapi.openapi, which imports this, passes both)."""
    common = {"tags": ("openai",), "openai": True, "description": CHUNKS}
    return [
        operation("openai-chat-completions", "post", "OpenAI-compatible chat over a text-generation task (the model's "
                  "chat template), continuously batched.", ChatCompletion, errors, ChatCompletionRequest,
                  example={"model": "my-gpt", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 16},
                  streams=True, **common),
        operation("openai-completions", "post", "OpenAI-compatible completions over a text-generation task, "
                  "continuously batched.", Completion, errors, CompletionRequest,
                  example={"model": "my-gpt", "prompt": "Once upon a time", "max_tokens": 16}, streams=True,
                  **common),
    ]
