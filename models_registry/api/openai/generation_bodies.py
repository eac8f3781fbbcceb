"""OpenAI's chat completions and completions bodies as pydantic shapes: the routes validate with them, the OpenAPI
document shows them (one definition, as api.shapes.request_schemas' bodies).

What no JSON Schema of one field can say is checked once the shape passed: the tools'
names are distinct and a named tool_choice is one of them (api.openai.tool_schemas), a
tool turn carries its call's id, a response_format schema is within the bounds
(api.openai.openai_options). A failed shape is ONE 400 naming its field (`explain`).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, ValidationError, with_config
from typing_extensions import NotRequired, Required, TypedDict

from models_registry.api.openai.openai_options import MAX_COMPLETION_LOGPROBS, MAX_TOP_LOGPROBS, NO_OPS, same
from models_registry.api.openai.tool_schemas import FIELDS as TOOL_FIELDS
from models_registry.api.openai.tool_schemas import MAX_TOOLS, NAME
from models_registry.api.pipeline.error_answers import invalid
from models_registry.core.errors import InvalidInput
from models_registry.tasks.parameter_types import SHAPE_CONFIG, Says, integer
from models_registry.tasks.shape_errors import adapter, deepest, detail, phrase, unknown_keys
from models_registry.tasks.task_parameters import MAX_NEW_TOKENS

MAX_CHOICES = 8  # n, and prompts of a completions request: each choice (prompt x n) is one generated stream
MAX_STOPS = 4  # OpenAI's limit
MAX_STOP_CHARS = 256
MAX_MESSAGES = 256
ROLES = ("system", "user", "assistant", "developer", "tool")
# Bookkeeping and caching hints: accepted, no effect here.
IGNORED = ("user", "store", "metadata", "service_tier", "prompt_cache_key", "safety_identifier")
# A message as clients hand back the one they were answered (with refusal, annotations, ...): keys nobody declared
# are dropped, not refused, as the server always took them.
LENIENT = ConfigDict(**{**SHAPE_CONFIG, "extra": "ignore"})


def _valid_text(value: Any) -> Any:
    # JSON may escape a lone surrogate ("\ud800"), which no tokenizer can encode; no JSON Schema can refuse it.
    if isinstance(value, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise ValueError("a stop sequence must be valid text (no surrogate characters)")
    return value


Stop = Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS, pattern="^[^\ufffd]*$"),
                 BeforeValidator(_valid_text)]
MaxTokens = integer(1, MAX_NEW_TOKENS) | None


@with_config(LENIENT)
class TextPart(TypedDict):
    """One text part of a message's content."""

    type: Literal["text"]
    text: str


@with_config(LENIENT)
class CalledFunction(TypedDict, total=False):
    """A call's function: its name and its arguments as JSON text."""

    name: Required[str]
    arguments: Annotated[str | dict[str, Any], Field(description="a JSON object as text (an object is taken too); "
                                                                 "default {}")]


@with_config(LENIENT)
class MessageToolCall(TypedDict, total=False):
    """A call an assistant turn made."""

    id: str
    type: Literal["function"]
    function: Required[CalledFunction]


@with_config(LENIENT)
class Message(TypedDict, total=False):
    """One chat message (keys beyond these are ignored)."""

    role: Required[Literal[ROLES]]  # type: ignore[valid-type]
    content: str | list[TextPart] | None
    name: str
    tool_calls: Annotated[list[MessageToolCall] | None, Field(description="an assistant turn's calls")]
    tool_call_id: Annotated[str, Field(description="a tool turn: the id of the call it answers (required there)")]


ToolParameters = Annotated[dict[str, Any] | None, Field(description=(
    "a JSON Schema of its arguments, within response_format's bounds (all the tools' together)"))]


@with_config(SHAPE_CONFIG)
class FunctionSpec(TypedDict, total=False):
    """A function the model may call."""

    name: Required[Annotated[str, Field(pattern=NAME.pattern)]]
    description: str | None
    parameters: ToolParameters
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
class NamedChatToolChoice(TypedDict):
    """One function the answer must call."""

    type: Literal["function"]
    function: NamedFunction


@with_config(SHAPE_CONFIG)
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


# Told apart by their type: a 400 then speaks of the format the client sent.
Format = Annotated[TextFormat | JsonObjectFormat | JsonSchemaFormat, Field(discriminator="type")]
ResponseFormat = Annotated[Format | None, Field(description=(
    "structured output: each token is masked by the schema's grammar (no free whitespace); the answer ends when "
    "the JSON is complete (finish_reason stop), or is cut at max_tokens (length); where the grammar engine cannot "
    "go on mid-answer, the answer is a 400 (streamed: an error event after the chunks so far)")),
    Says('be {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", "json_schema": {"name": ..., '
         '"schema": {...}}}')]


def _no_op_check(neutrals: tuple[Any, ...]) -> Any:
    def check(value: Any) -> Any:
        # The type below says the values; this says their JSON type too (false is not 0, which pydantic's
        # Literal takes for one another).
        if value is not None and not any(same(value, neutral) for neutral in neutrals):
            raise ValueError("not a no-op value")
        return value

    return BeforeValidator(check)


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
    shown = "".join(f" or {json.dumps(v)}" for v in neutrals)
    return Annotated[None if union is None else union | None, _no_op_check(neutrals),
                     Field(description=f"not implemented: null{shown} (no effect)")]


def _common() -> dict[str, Any]:
    return {
        "model": Required[Annotated[str, Field(min_length=1, description="a text-generation model id from "
                                                                         "GET /v1/models")]],
        "max_tokens": NotRequired[Annotated[MaxTokens, Field(description="new tokens at most (default: the "
                                                                         "model's generation config, else 100)")]],
        "max_completion_tokens": NotRequired[Annotated[MaxTokens, Field(description="as max_tokens (wins)")]],
        "temperature": NotRequired[Annotated[float | None, Field(
            ge=0, le=2, description="0 (or below 0.01): greedy; above: sampling; absent: the model's default")]],
        "top_p": NotRequired[Annotated[float | None, Field(gt=0, le=1, description="nucleus sampling"),
                                       Says("be a number above 0, up to 1 (1 keeps every token)")]],
        "stop": NotRequired[Annotated[Stop | Annotated[list[Stop], Field(max_length=MAX_STOPS)] | None, Field(
            description="up to 4 sequences; the text ends before the first one (finish_reason stop)"), Says(
            f"be a string or a list of at most {MAX_STOPS} strings, each 1 to {MAX_STOP_CHARS} characters of valid "
            "text (no replacement or surrogate characters)")]],
        "seed": NotRequired[Annotated[integer(-(2**63), 2**63 - 1) | None, Field(description="choice i uses "
                                                                                             "seed + i")]],
        "n": NotRequired[Annotated[integer(1, MAX_CHOICES) | None, Field(description="choices per prompt")]],
        "stream": NotRequired[Annotated[bool | None, Field(description="OpenAI's chunks as server-sent events, "
                                                                       "then data: [DONE]")]],
        "stream_options": NotRequired[Annotated[StreamOptions | None, Says(
            'be an object like {"include_usage": true}')]],
        "response_format": NotRequired[ResponseFormat],
        **{name: NotRequired[_no_op(neutrals)] for name, neutrals in NO_OPS.items()},
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
    "top_logprobs": NotRequired[Annotated[integer(0, MAX_TOP_LOGPROBS) | None, Field(description=(
        'the most likely alternatives of each token, with "logprobs": true only (ignored without)'))]],
    "tools": NotRequired[Annotated[list[Tool] | None, Field(max_length=MAX_TOOLS, description=(
        "functions rendered with the model's chat template (a template that does not read tools, or whose format "
        "this server does not read, answers 400); the calls come back as message.tool_calls")), Says(
        f'be a list of at most {MAX_TOOLS} functions, {{"type": "function", "function": {{"name", "description", '
        '"parameters" (a JSON Schema object), "strict"}}, only functions are supported, each name 1-64 letters, '
        "digits, '_', '-' or '.'")]],
    "tool_choice": NotRequired[Annotated[Literal["none", "auto", "required"] | NamedChatToolChoice | None, Field(
        description="none: no tools rendered or read; auto (the default with tools); required or a named function: "
                    "a grammar forces a call, its arguments valid for the function's schema"),
        Says('be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}')]],
    "parallel_tool_calls": NotRequired[Annotated[bool | None, Field(description="false: one call at most")]],
}))
ChatCompletionRequest.__doc__ = "OpenAI's chat completions request."

CompletionRequest = with_config(SHAPE_CONFIG)(TypedDict("CompletionRequest", {  # type: ignore[operator]
    **_common(),
    "prompt": Required[Annotated[str | Annotated[list[str], Field(min_length=1, max_length=MAX_CHOICES)], Field(
        description="a prompt, or a list of prompts (n choices each); token ids are answered 400")]],
    "logprobs": NotRequired[Annotated[integer(0, MAX_COMPLETION_LOGPROBS) | None, Field(description=(
        "each token's logprob and this many alternatives (choices[].logprobs: tokens, token_logprobs, "
        "top_logprobs, text_offset): the model's raw log-softmax"))]],
}))
CompletionRequest.__doc__ = "OpenAI's completions request."

SHAPES = {True: ChatCompletionRequest, False: CompletionRequest}
ADAPTERS = {chat: adapter(shape) for chat, shape in SHAPES.items()}  # built once: about a millisecond each


def validate(payload: Any, chat: bool) -> dict[str, Any]:
    """payload checked against the chat (or completions) shape; the one 400 naming its field when it fails."""
    try:
        return ADAPTERS[chat].validate_python(payload)
    except ValidationError as error:
        raise explain(payload, error, chat) from None


def explain(payload: Any, error: ValidationError, chat: bool) -> InvalidInput:
    """The one 400 for a body that failed its shape, naming the field (OpenAI's `param`): unknown keys first."""
    if not isinstance(payload, dict):
        return invalid('request body must be a JSON object like {"model": "...", '
                       + ('"messages": [...]}' if chat else '"prompt": "..."}'), None)
    errors = error.errors(include_url=False)
    unknown = unknown_keys(errors)
    if unknown:
        return invalid(f"unrecognized request argument(s): {', '.join(unknown)}", unknown[0])
    field = str(errors[0]["loc"][0])
    value = payload.get(field)
    if field == "model":
        return invalid("'model' is required: a model id from GET /v1/models", "model")
    if field in NO_OPS and not (chat and field in TOOL_FIELDS):  # chat implements the tool fields
        shown = " or ".join(repr(n) for n in NO_OPS[field])
        return invalid(f"{field!r} is not supported by this server: leave it out"
                       + (f", or send {shown}" if NO_OPS[field] else ""), field)
    if field == "messages" and isinstance(value, list) and len(value) > MAX_MESSAGES:
        return invalid(f"{len(value)} messages: at most {MAX_MESSAGES}", field)
    if field == "messages" and isinstance(value, list) and value:
        where = _where(errors, field, payload)
        return invalid(f"{where} must be an object with a role ({', '.join(ROLES)}) and content: a string, text "
                       "parts or null" + detail(errors, field, payload), field)
    if field == "messages":
        return invalid("'messages' is required: a non-empty list of {\"role\", \"content\"} objects", field)
    if field == "prompt":
        return _explain_prompt(value)
    return invalid(f"{field!r} must {phrase(SHAPES[chat], field)}" + detail(errors, field, payload), field)


def _explain_prompt(value: Any) -> InvalidInput:
    if isinstance(value, list) and value and all(isinstance(p, int) and not isinstance(p, bool) for p in value):
        return invalid("token-id prompts are not supported: send text", "prompt")
    if isinstance(value, list) and len(value) > MAX_CHOICES and all(isinstance(p, str) for p in value):
        return invalid(f"{len(value)} prompts: at most {MAX_CHOICES}", "prompt")
    return invalid("'prompt' is required: a string or a non-empty list of strings", "prompt")


def _where(errors: list[Any], field: str, payload: dict[str, Any]) -> str:
    """The failing item of a list field (messages[2]), or the field."""
    path, _ = deepest(errors, field, payload)
    return path[:path.index("]") + 1] if "[" in path else field
