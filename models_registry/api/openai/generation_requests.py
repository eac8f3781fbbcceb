"""OpenAI's chat and completions bodies, validated into what a text-generation worker takes (pure: no I/O).

Every bad value is a 400 that names its field (OpenAI's `param`). Sampling follows
OpenAI: temperature 0 is greedy, above it samples; without temperature the model's own
generation config decides (as `transformers serve`). Fields the openai SDK and
huggingface_hub may send as null are taken as absent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from models_registry.api.pipeline.error_answers import invalid
from models_registry.api.openai.tool_schemas import FIELDS as TOOL_FIELDS
from models_registry.api.openai.tool_schemas import ToolRequest, read_tools, tool_turn, with_result_names
from models_registry.api.openai.openai_options import NO_OPS, check_no_ops, read_logprobs, read_response_format
from models_registry.tasks.task_parameters import MAX_NEW_TOKENS

MAX_CHOICES = 8  # n, and prompts of a completions request: each choice (prompt x n) is one generated stream
MAX_STOPS = 4  # OpenAI's limit
MAX_STOP_CHARS = 256
MAX_MESSAGES = 256
MIN_TEMPERATURE = 0.01  # below it: greedy, as temperature 0
ROLES = ("system", "user", "assistant", "developer", "tool")
# Bookkeeping and caching hints: accepted, no effect here.
IGNORED = ("user", "store", "metadata", "service_tier", "prompt_cache_key", "safety_identifier")
COMMON = ("model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "stop", "seed", "n", "stream",
          "stream_options", "logprobs", "response_format")


@dataclass(frozen=True)
class GenerationRequest:
    """A validated chat or completions body."""

    model: str
    chat: bool
    prompts: list[str]  # completions: one per prompt; chat: the messages' text (for the charge estimate)
    messages: list[dict[str, Any]] | None
    n: int
    parameters: dict[str, Any]  # the worker's text-generation parameters (max_new_tokens, do_sample, ...)
    stops: list[str]
    stream: bool
    include_usage: bool
    seed: int | None
    logprobs: int | None = None  # alternatives per token with its logprob (None: no logprobs)
    schema: str | None = None  # response_format's schema, bounded and canonical (tasks.schema_bounds); None: free text
    grammar: str | None = None  # the schema's grammar, compiled once the route prepares it (api.openai.structured_output)
    tools: ToolRequest | None = None  # chat: the functions the model may call (api.openai.tool_schemas)

    @property
    def choices(self) -> int:
        """How many generations answer it."""
        return len(self.prompts if not self.chat else [0]) * self.n


def read(payload: Any, chat: bool) -> GenerationRequest:
    """Validate a POST /v1/chat/completions (chat) or /v1/completions body."""
    if not isinstance(payload, dict):
        raise invalid('request body must be a JSON object like {"model": "...", '
                      + ('"messages": [...]}' if chat else '"prompt": "..."}'), None)
    own = ("messages", "top_logprobs", *TOOL_FIELDS) if chat else ("prompt",)
    known = set(COMMON) | set(NO_OPS) | set(IGNORED) | set(own)
    unknown = sorted(set(payload) - known)
    if unknown:
        raise invalid(f"unrecognized request argument(s): {', '.join(unknown)}", unknown[0])
    check_no_ops(payload, skip=TOOL_FIELDS if chat else ())
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("'model' is required: a model id from GET /v1/models", "model")
    messages = _messages(payload.get("messages")) if chat else None
    prompts = [m["content"] for m in messages] if messages else _prompts(payload.get("prompt"))
    n = _integer(payload, "n", 1, MAX_CHOICES, 1)
    stream = payload.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise invalid("'stream' must be true or false", "stream")
    options = payload.get("stream_options")
    if options is not None and (not isinstance(options, dict) or set(options) - {"include_usage",
                                                                                  "continuous_usage_stats"}):
        raise invalid("'stream_options' must be an object like {\"include_usage\": true}", "stream_options")
    include_usage = bool((options or {}).get("include_usage"))  # read with "stream": true only
    seed = _integer(payload, "seed", -(2**63), 2**63 - 1, None)
    return GenerationRequest(model=model, chat=chat, prompts=prompts, messages=messages, n=n,
                             parameters=_sampling(payload), stops=_stops(payload.get("stop")),
                             stream=bool(stream), include_usage=include_usage, seed=seed,
                             logprobs=read_logprobs(payload, chat),
                             schema=read_response_format(payload.get("response_format")),
                             tools=read_tools(payload) if chat else None)


def worker_parameters(request: GenerationRequest, choice: int) -> dict[str, Any]:
    """The parameters one choice is generated with: its own seed (seed + choice), so n samples differ."""
    parameters = {**request.parameters, "stop": request.stops}
    if request.messages is not None:
        parameters["messages"] = request.messages
    if request.seed is not None:
        parameters["seed"] = (request.seed + choice) % 2**63  # a negative OpenAI seed too
    if request.logprobs is not None:
        parameters["logprobs"] = request.logprobs
    if request.grammar is not None:
        parameters["grammar"] = request.grammar
    if request.tools is not None:
        parameters["tools"] = request.tools.tools
    return parameters


def _messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise invalid("'messages' is required: a non-empty list of {\"role\", \"content\"} objects", "messages")
    if len(value) > MAX_MESSAGES:
        raise invalid(f"{len(value)} messages: at most {MAX_MESSAGES}", "messages")
    messages = []
    for n, message in enumerate(value):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise invalid(f"messages[{n}] must be an object with a role ({', '.join(ROLES)}) and content",
                          "messages")
        content = message.get("content")
        if isinstance(content, list):  # OpenAI's content parts: text parts only
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                raise invalid(f"messages[{n}].content: only text parts are supported", "messages")
            content = "".join(p["text"] for p in content)
        if content is None:  # an assistant turn that only called tools, say
            content = ""
        if not isinstance(content, str):
            raise invalid(f"messages[{n}].content must be a string", "messages")
        messages.append({"role": message["role"], "content": content, **tool_turn(message, n)})
    return with_result_names(messages)


def _prompts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(p, str) for p in value):
        if len(value) > MAX_CHOICES:
            raise invalid(f"{len(value)} prompts: at most {MAX_CHOICES}", "prompt")
        return list(value)
    if isinstance(value, list) and value and all(isinstance(p, int) and not isinstance(p, bool) for p in value):
        raise invalid("token-id prompts are not supported: send text", "prompt")
    raise invalid("'prompt' is required: a string or a non-empty list of strings", "prompt")


def _stops(value: Any) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise invalid("'stop' must be a string or a list of strings", "stop")
    if len(stops) > MAX_STOPS:
        raise invalid(f"{len(stops)} stop sequences: at most {MAX_STOPS}", "stop")
    for stop in stops:
        if not stop:
            raise invalid("a stop sequence must not be empty", "stop")
        if len(stop) > MAX_STOP_CHARS:
            raise invalid(f"a stop sequence has at most {MAX_STOP_CHARS} characters", "stop")
        if "\ufffd" in stop or any(0xD800 <= ord(c) <= 0xDFFF for c in stop):
            raise invalid("a stop sequence must be valid text (no replacement or surrogate characters)", "stop")
    return stops


def _number(payload: dict[str, Any], name: str, low: float, high: float) -> float | None:
    value = payload.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise invalid(f"{name!r} must be a number from {low:g} to {high:g}", name)
    if not low <= value <= high:
        raise invalid(f"{name!r} must be from {low:g} to {high:g}, not {value!r}", name)
    return float(value)


def _integer(payload: dict[str, Any], name: str, low: int, high: int, default: int | None) -> int | None:
    value = payload.get(name)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f"{name!r} must be an integer from {low} to {high}", name)
    if not low <= value <= high:
        raise invalid(f"{name!r} must be from {low} to {high}, not {value}", name)
    return value


def _sampling(payload: dict[str, Any]) -> dict[str, Any]:
    """max_new_tokens and sampling in the worker's terms (transformers' generate)."""
    parameters: dict[str, Any] = {}
    for name in ("max_completion_tokens", "max_tokens"):
        value = _integer(payload, name, 1, MAX_NEW_TOKENS, None)
        if value is not None:
            parameters["max_new_tokens"] = value
            break
    temperature = _number(payload, "temperature", 0, 2)
    top_p = _number(payload, "top_p", 0, 1)
    if top_p == 0:
        raise invalid("'top_p' must be above 0 (1 keeps every token)", "top_p")
    if temperature is not None and temperature < MIN_TEMPERATURE:
        parameters["do_sample"] = False  # OpenAI's greedy (a tinier divisor would overflow the logits)
    elif temperature is not None:
        parameters["do_sample"] = True
        parameters["temperature"] = temperature
    if top_p is not None and top_p < 1 and parameters.get("do_sample") is not False:
        parameters["top_p"] = top_p
    return parameters
