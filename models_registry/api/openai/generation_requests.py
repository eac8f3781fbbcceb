"""OpenAI's chat and completions bodies, read into what a text-generation worker takes (pure: no I/O).

The body is validated by its shape (api.openai.generation_bodies, which the OpenAPI document
shows); this turns the validated values into a GenerationRequest. Sampling follows OpenAI:
temperature 0 is greedy, above it samples; without temperature the model's own generation config
decides (as `transformers serve`). Fields the openai SDK and huggingface_hub may send as null are
taken as absent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from models_registry.api.openai import generation_bodies
from models_registry.api.openai.openai_options import read_logprobs, read_response_format
from models_registry.api.openai.tool_schemas import ToolRequest, read_tools, tool_turn, with_result_names

MIN_TEMPERATURE = 0.01  # below it: greedy, as temperature 0


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
    body = generation_bodies.validate(payload, chat)
    messages = _messages(body["messages"]) if chat else None
    prompt = body.get("prompt")
    prompts = [m["content"] for m in messages] if messages else [prompt] if isinstance(prompt, str) else prompt
    options = body.get("stream_options") or {}
    return GenerationRequest(model=body["model"], chat=chat, prompts=prompts, messages=messages,
                             n=body.get("n") or 1, parameters=_sampling(body), stops=_stops(body.get("stop")),
                             stream=bool(body.get("stream")), include_usage=bool(options.get("include_usage")),
                             seed=body.get("seed"), logprobs=read_logprobs(body, chat),
                             schema=read_response_format(body.get("response_format")),
                             tools=read_tools(body) if chat else None)


def worker_parameters(request: GenerationRequest, choice: int) -> dict[str, Any]:
    """The parameters one choice is generated with: its own seed (seed + choice), so n samples differ."""
    # OpenAI's answers read logprobs only as the entries "logprobs" asks for: the worker spares each token's
    # (a log-softmax over the vocabulary per row and step) that TGI's events carry.
    parameters = {**request.parameters, "stop": request.stops, "token_logprob": False}
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


def _messages(value: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Validated messages as the chat template takes them: text parts joined, a turn with no content empty."""
    messages = []
    for n, message in enumerate(value):
        content = message.get("content")
        if isinstance(content, list):  # OpenAI's content parts: text parts only (the shape says so)
            content = "".join(p["text"] for p in content)
        messages.append({"role": message["role"], "content": content or "", **tool_turn(message, n)})
    return with_result_names(messages)


def _stops(value: str | list[str] | None) -> list[str]:
    return [] if value is None else [value] if isinstance(value, str) else value


def _sampling(body: dict[str, Any]) -> dict[str, Any]:
    """max_new_tokens and sampling in the worker's terms (transformers' generate)."""
    parameters: dict[str, Any] = {}
    tokens = body.get("max_completion_tokens") or body.get("max_tokens")  # OpenAI's newer name wins
    if tokens is not None:
        parameters["max_new_tokens"] = tokens
    temperature, top_p = body.get("temperature"), body.get("top_p")
    if temperature is not None and temperature < MIN_TEMPERATURE:
        parameters["do_sample"] = False  # OpenAI's greedy (a tinier divisor would overflow the logits)
    elif temperature is not None:
        parameters["do_sample"] = True
        parameters["temperature"] = float(temperature)
    if top_p is not None and top_p < 1 and parameters.get("do_sample") is not False:
        parameters["top_p"] = float(top_p)
    return parameters
