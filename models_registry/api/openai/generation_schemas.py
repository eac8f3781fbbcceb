"""The OpenAPI shapes of /v1/chat/completions and /v1/completions (what api.openai.generation_requests accepts)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, with_config
from typing_extensions import NotRequired, Required, TypedDict

from models_registry.api.openai.generation_requests import (
    IGNORED,
    MAX_CHOICES,
    MAX_MESSAGES,
    MAX_STOP_CHARS,
    MAX_STOPS,
    ROLES,
)
from models_registry.api.openai.tool_schemas import MAX_TOOLS, NAME
from models_registry.api.openai.openai_options import MAX_COMPLETION_LOGPROBS, MAX_TOP_LOGPROBS, NO_OPS
from models_registry.api.shapes.response_schemas import OPEN
from models_registry.tasks.task_parameters import MAX_NEW_TOKENS, SHAPE_CONFIG

# Any JSON value that is not a surrogate or replacement character: the validator's own check stays in the code.
Stop = Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS, pattern="^[^\ufffd]*$")]
MaxTokens = Annotated[int | None, Field(ge=1, le=MAX_NEW_TOKENS)]


class TextPart(TypedDict):
    """One text part of a message's content."""

    type: Literal["text"]
    text: str


class FunctionCall(TypedDict):
    """A call's function: its name and its arguments as JSON text."""

    name: str
    arguments: str


class MessageToolCall(TypedDict, total=False):
    """A call an assistant turn made."""

    id: str
    type: Literal["function"]
    function: Required[FunctionCall]


class Message(TypedDict, total=False):
    """One chat message."""

    role: Required[Literal[ROLES]]  # type: ignore[valid-type]
    content: str | list[TextPart] | None
    name: str
    tool_calls: Annotated[list[MessageToolCall], Field(description="an assistant turn's calls")]
    tool_call_id: Annotated[str, Field(description="a tool turn: the id of the call it answers (required there)")]


@with_config(SHAPE_CONFIG)
class FunctionSpec(TypedDict, total=False):
    """A function the model may call."""

    name: Required[Annotated[str, Field(pattern=NAME.pattern)]]
    description: str
    parameters: Annotated[dict[str, Any], Field(description=(
        "a JSON Schema of its arguments, within response_format's bounds (all the tools' together)"))]
    strict: bool | None


@with_config(SHAPE_CONFIG)
class Tool(TypedDict):
    """A tool: a function."""

    type: Literal["function"]
    function: FunctionSpec


@with_config(SHAPE_CONFIG)
class NamedFunction(TypedDict):
    """The function a named tool_choice calls."""

    name: str


@with_config(SHAPE_CONFIG)
class NamedToolChoice(TypedDict):
    """One function the answer must call."""

    type: Literal["function"]
    function: NamedFunction


class StreamOptions(TypedDict, total=False):
    """With "stream": true only."""

    include_usage: bool
    continuous_usage_stats: bool


@with_config(SHAPE_CONFIG)
class TextFormat(TypedDict):
    """Plain text (the default)."""

    type: Literal["text"]


@with_config(SHAPE_CONFIG)
class JsonObjectFormat(TypedDict):
    """Any JSON object, compact."""

    type: Literal["json_object"]


@with_config(SHAPE_CONFIG)
class JsonSchemaSpec(TypedDict, total=False):
    """The schema the answer follows."""

    name: Required[Annotated[str, Field(min_length=1, max_length=64)]]
    schema: Annotated[dict[str, Any], Field(description=(
        "a JSON Schema; one over the size bounds (docs/generation.md), with no finite instance, or that the grammar "
        "engine (llguidance) cannot compile or write is a 400 naming response_format"))]
    strict: Annotated[bool | None, Field(description="true: an object schema that lists properties and says "
                                                     "nothing of others takes no others")]
    description: str


@with_config(SHAPE_CONFIG)
class JsonSchemaFormat(TypedDict):
    """JSON that follows a schema, compact."""

    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


ResponseFormat = Annotated[TextFormat | JsonObjectFormat | JsonSchemaFormat | None, Field(description=(
    "structured output: each token is masked by the schema's grammar (no free whitespace); the answer ends when "
    "the JSON is complete (finish_reason stop), or is cut at max_tokens (length); where the grammar engine cannot "
    "go on mid-answer, the answer is a 400 (streamed: an error event after the chunks so far)"))]


def _no_op(neutrals: tuple[Any, ...]) -> Any:
    """The type that admits null and exactly the no-op values of an unimplemented field."""
    shapes: list[Any] = []
    for value in neutrals:
        if isinstance(value, dict):
            shapes.append(Annotated[dict[str, Any], Field(max_length=0)])
        elif isinstance(value, list):
            shapes.append(Annotated[list[Literal[tuple(value)]], Field(min_length=len(value), max_length=len(value))]
                          if value else Annotated[list[Any], Field(max_length=0)])
        else:
            shapes.append(Literal[value])
    union: Any = None
    for shape in dict.fromkeys(shapes):
        union = shape if union is None else union | shape
    return None if union is None else union | None


def _common() -> dict[str, Any]:
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
        "response_format": NotRequired[ResponseFormat],
        **{name: NotRequired[Annotated[_no_op(neutrals), Field(description="not implemented: null" + "".join(
            f" or {json.dumps(v)}" for v in neutrals) + " (no effect)")]] for name, neutrals in NO_OPS.items()},
        **{name: NotRequired[Annotated[Any, Field(description="accepted and ignored")]] for name in IGNORED},
    }


# A forced tool_choice needs tools to choose from (what api.openai.tool_schemas checks; a named one's name is not said).
FORCED_NEEDS_TOOLS = {"if": {"required": ["tool_choice"], "properties": {"tool_choice": {"anyOf": [
    {"const": "required"}, {"type": "object"}]}}}, "then": {"required": ["tools"], "properties": {"tools": {
        "type": "array", "minItems": 1}}}}
CHAT_CONFIG = ConfigDict(**SHAPE_CONFIG, json_schema_extra=FORCED_NEEDS_TOOLS)
ChatCompletionRequest = with_config(CHAT_CONFIG)(TypedDict("ChatCompletionRequest", {  # type: ignore[operator]
    **_common(),
    "messages": Required[Annotated[list[Message], Field(min_length=1, max_length=MAX_MESSAGES, description=(
        "rendered with the model's chat template (a model without one answers 400)"))]],
    "logprobs": NotRequired[Annotated[bool | None, Field(description=(
        "each token's logprob in choices[].logprobs.content: the model's raw log-softmax (before temperature, "
        "top_p and penalties; after a response_format's mask)"))]],
    "top_logprobs": NotRequired[Annotated[int | None, Field(ge=0, le=MAX_TOP_LOGPROBS, description=(
        'the most likely alternatives of each token, with "logprobs": true only'))]],
    "tools": NotRequired[Annotated[list[Tool] | None, Field(max_length=MAX_TOOLS, description=(
        "functions rendered with the model's chat template (a template that does not read tools, or whose format "
        "this server does not read, answers 400); the calls come back as message.tool_calls"))]],
    "tool_choice": NotRequired[Annotated[Literal["none", "auto", "required"] | NamedToolChoice | None, Field(
        description="none: no tools rendered or read; auto (the default with tools); required or a named function: "
                    "a grammar forces a call, its arguments valid for the function's schema")]],
    "parallel_tool_calls": NotRequired[Annotated[bool | None, Field(description="false: one call at most")]],
}))
ChatCompletionRequest.__doc__ = "OpenAI's chat completions request."

CompletionRequest = with_config(SHAPE_CONFIG)(TypedDict("CompletionRequest", {  # type: ignore[operator]
    **_common(),
    "prompt": Required[Annotated[str | Annotated[list[str], Field(min_length=1, max_length=MAX_CHOICES)], Field(
        description="a prompt, or a list of prompts (n choices each)")]],
    "logprobs": NotRequired[Annotated[int | None, Field(ge=0, le=MAX_COMPLETION_LOGPROBS, description=(
        "each token's logprob and this many alternatives (choices[].logprobs: tokens, token_logprobs, "
        "top_logprobs, text_offset): the model's raw log-softmax"))]],
}))
CompletionRequest.__doc__ = "OpenAI's completions request."


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
