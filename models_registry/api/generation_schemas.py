"""The OpenAPI shapes of /v1/chat/completions and /v1/completions (what api.generation_requests accepts)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, with_config
from typing_extensions import NotRequired, Required, TypedDict

from models_registry.api.generation_requests import (
    IGNORED,
    MAX_CHOICES,
    MAX_MESSAGES,
    MAX_STOP_CHARS,
    MAX_STOPS,
    ROLES,
    UNSUPPORTED,
)
from models_registry.api.response_schemas import OPEN
from models_registry.tasks.task_parameters import MAX_NEW_TOKENS, SHAPE_CONFIG

# Any JSON value that is not a surrogate or replacement character: the validator's own check stays in the code.
Stop = Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS, pattern="^[^\ufffd]*$")]
MaxTokens = Annotated[int | None, Field(ge=1, le=MAX_NEW_TOKENS)]


class TextPart(TypedDict):
    """One text part of a message's content."""

    type: Literal["text"]
    text: str


class Message(TypedDict, total=False):
    """One chat message."""

    role: Required[Literal[ROLES]]  # type: ignore[valid-type]
    content: str | list[TextPart] | None
    name: str


class StreamOptions(TypedDict, total=False):
    """With "stream": true only."""

    include_usage: bool
    continuous_usage_stats: bool


def _common() -> dict[str, Any]:
    unsupported = "not supported: null (or its no-op value) only"
    return {
        "model": Required[Annotated[str, Field(min_length=1, description="a text-generation model id from "
                                                                         "GET /v1/models")]],
        "max_tokens": NotRequired[Annotated[MaxTokens, Field(description="new tokens at most (default: the "
                                                                         "model's generation config, else 100)")]],
        "max_completion_tokens": NotRequired[Annotated[MaxTokens, Field(description="as max_tokens (wins)")]],
        "temperature": NotRequired[Annotated[float | None, Field(
            ge=0, le=2, description="0 (or below 0.01): greedy; above: sampling; absent: the model's default")]],
        "top_p": NotRequired[Annotated[float | None, Field(gt=0, le=1, description="nucleus sampling")]],
        "stop": NotRequired[Annotated[Stop | Annotated[list[Stop], Field(max_length=MAX_STOPS)] | None, Field(
            description="up to 4 sequences; the text ends before the first one (finish_reason stop)")]],
        "seed": NotRequired[Annotated[int | None, Field(ge=-(2**63), le=2**63 - 1, description="choice i uses "
                                                                                               "seed + i")]],
        "n": NotRequired[Annotated[int | None, Field(ge=1, le=MAX_CHOICES, description="choices per prompt")]],
        "stream": NotRequired[Annotated[bool | None, Field(description="OpenAI's chunks as server-sent events, "
                                                                       "then data: [DONE]")]],
        "stream_options": NotRequired[StreamOptions | None],
        **{name: NotRequired[Annotated[(None if neutral is None else Literal[neutral] | None),  # type: ignore[valid-type]
                                      Field(description=unsupported)]] for name, neutral in UNSUPPORTED.items()},
        **{name: NotRequired[Annotated[Any, Field(description="accepted and ignored")]] for name in IGNORED},
    }


ChatCompletionRequest = with_config(SHAPE_CONFIG)(TypedDict("ChatCompletionRequest", {  # type: ignore[operator]
    **_common(),
    "messages": Required[Annotated[list[Message], Field(min_length=1, max_length=MAX_MESSAGES, description=(
        "rendered with the model's chat template (a model without one answers 400)"))]],
}))
ChatCompletionRequest.__doc__ = "OpenAI's chat completions request."

CompletionRequest = with_config(SHAPE_CONFIG)(TypedDict("CompletionRequest", {  # type: ignore[operator]
    **_common(),
    "prompt": Required[Annotated[str | Annotated[list[str], Field(min_length=1, max_length=MAX_CHOICES)], Field(
        description="a prompt, or a list of prompts (n choices each)")]],
}))
CompletionRequest.__doc__ = "OpenAI's completions request."


@with_config(OPEN)
class GenerationUsage(TypedDict):
    """Tokens: each prompt once, every generated token (what the token is charged)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


@with_config(OPEN)
class AssistantMessage(TypedDict):
    """The generated message."""

    role: Literal["assistant"]
    content: str


@with_config(OPEN)
class ChatChoice(TypedDict):
    """One choice of a chat answer."""

    index: int
    message: AssistantMessage
    logprobs: None
    finish_reason: Literal["stop", "length"]


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
class CompletionChoice(TypedDict):
    """One choice of a completions answer."""

    index: int
    text: str
    logprobs: None
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
          '"model", "choices": [{"index", "delta": {"role"?, "content"} (or "text"), "finish_reason"}]}` events, '
          'with stream_options.include_usage a last chunk with "usage" and no choices, then `data: [DONE]`; an '
          'error after the first byte is a `data: {"error": {...}}` event.')


def operations(operation: Any, errors: tuple[int, ...]) -> list[Any]:
    """The two routes, as api.openapi's Operation objects with errors (api.openapi, which imports this, passes both)."""
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
