"""OpenAI's Responses body translated into a chat body and read by the chat reader (pure: no I/O).

The body is validated by its shape (api.openai.responses_bodies, which the OpenAPI document
shows). `input` (a string or items: messages, `function_call`, `function_call_output`),
`instructions`, the flat `tools`, `text.format` and `max_output_tokens` become chat's messages,
tools, response_format and max_completion_tokens; generation_requests.read then applies every
chat rule, and its 400s are told in the Responses field's name. A stored response's conversation
(previous_response_id) is put before the input once the route has read it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from models_registry.api.openai import generation_requests, responses_bodies
from models_registry.api.openai.generation_requests import GenerationRequest
from models_registry.api.pipeline.error_answers import invalid
from models_registry.core.errors import InvalidInput

# A chat field's name in a Responses body, for the 400s of the chat reader.
RENAMED = {"messages": "input", "max_completion_tokens": "max_output_tokens", "response_format": "text.format"}


@dataclass(frozen=True)
class ResponsesRequest:
    """A validated Responses body: the chat request it runs as, and what the answer echoes and keeps."""

    chat: GenerationRequest
    payload: dict[str, Any]  # the chat body it was read from (before any stored conversation)
    items: list[dict[str, Any]]  # the input as Responses items (kept with the answer when stored)
    echo: dict[str, Any]  # the request fields a Response object repeats
    store: bool
    previous_id: str | None


def read(payload: Any) -> ResponsesRequest:
    """Validate a POST /v1/responses body: its shape, then every chat rule, named by the Responses field."""
    body = responses_bodies.validate(payload)
    items = input_items(body["input"])
    chat = chat_payload(body, items)
    return ResponsesRequest(chat=read_chat(chat), payload=chat, items=items, echo=echo(body),
                            store=body.get("store") is not False, previous_id=body.get("previous_response_id"))


def with_history(request: ResponsesRequest, history: list[dict[str, Any]]) -> ResponsesRequest:
    """request with a stored conversation's items before its own input (its own instructions stay first)."""
    if not history:
        return request
    instructions = request.echo.get("instructions")
    head = [{"role": "system", "content": instructions}] if instructions is not None else []
    payload = {**request.payload, "messages": head + messages(history + request.items)}
    return dataclasses.replace(request, chat=read_chat(payload))


def read_chat(payload: dict[str, Any]) -> GenerationRequest:
    """The chat reader's request of payload; its 400s named by the Responses field."""
    try:
        return generation_requests.read(payload, chat=True)
    except InvalidInput as error:
        param = getattr(error, "param", None)
        if param not in RENAMED:
            raise
        message = error.message.replace(f"'{param}'", f"'{RENAMED[param]}'").replace(param, RENAMED[param])
        raise invalid(message, RENAMED[param]) from None


def chat_payload(body: dict[str, Any], items: list[dict[str, Any]]) -> dict[str, Any]:
    """The chat body a Responses body asks for (its values checked by the chat reader)."""
    chat: dict[str, Any] = {"model": body.get("model"), "messages": [], "stream": body.get("stream")}
    if body.get("instructions") is not None:
        chat["messages"].append({"role": "system", "content": body["instructions"]})
    chat["messages"].extend(messages(items))
    for ours, theirs in (("max_output_tokens", "max_completion_tokens"), ("temperature", "temperature"),
                         ("top_p", "top_p"), ("tool_choice", "tool_choice"),
                         ("parallel_tool_calls", "parallel_tool_calls")):
        if body.get(ours) is not None:
            chat[theirs] = body[ours]
    if body.get("tools") is not None:
        chat["tools"] = chat_tools(body["tools"])
    if isinstance(chat.get("tool_choice"), dict):
        chat["tool_choice"] = chat_tool_choice(chat["tool_choice"])
    fmt = text_format(body.get("text"))
    if fmt is not None:
        chat["response_format"] = fmt
    return chat


def input_items(value: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The validated input as Responses items: a string is one user message; each item's text joined."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    # A reasoning item handed back (a previous response's output as input) is not sent to the model again.
    return [_item(item) for item in value if item.get("type") != "reasoning"]


def _item(item: dict[str, Any]) -> dict[str, Any]:
    kind = item.get("type", "message")
    if kind == "message":
        return {"type": "message", "role": item["role"], "content": _text(item["content"])}
    if kind == "function_call":
        return {"type": "function_call", "call_id": item["call_id"], "name": item["name"],
                "arguments": item["arguments"] or "{}"}
    return {"type": "function_call_output", "call_id": item["call_id"], "output": _text(item["output"])}


def _text(content: str | list[dict[str, Any]]) -> str:
    return content if isinstance(content, str) else "".join(p["text"] for p in content)


def messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Responses items as chat messages: calls join the assistant turn just before them, outputs are tool turns."""
    chat: list[dict[str, Any]] = []
    for item in items:
        if item["type"] == "message":
            chat.append({"role": item["role"], "content": item["content"]})
        elif item["type"] == "function_call":
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            last = chat[-1] if chat else None
            if last is not None and last["role"] == "assistant":  # the text and the calls of one turn
                last.setdefault("tool_calls", []).append(call)
            else:
                chat.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif item["type"] == "function_call_output":
            chat.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
    return chat


def chat_tools(value: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Responses' validated flat functions ({"type", "name", "description", "parameters", "strict"}) as chat's."""
    return [{"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}} for tool in value]


def chat_tool_choice(value: dict[str, Any]) -> dict[str, Any]:
    """Responses' {"type": "function", "name"} as chat's {"type": "function", "function": {"name"}}."""
    return {"type": "function", "function": {"name": value["name"]}}


def text_format(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """A validated text.format ({"type": "json_schema", "name", "schema", "strict"}, json_object, text) as a
    response_format."""
    fmt = (value or {}).get("format")
    if fmt is None or fmt["type"] != "json_schema":
        return fmt
    return {"type": "json_schema", "json_schema": {k: v for k, v in fmt.items() if k != "type"}}


def echo(body: dict[str, Any]) -> dict[str, Any]:
    """What a Response object repeats of its request (OpenAI's defaults where the body is silent)."""
    fmt = (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) else None
    return {"instructions": body.get("instructions"), "tools": body.get("tools") or [],
            "tool_choice": body.get("tool_choice") or "auto",
            "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
            "text": {"format": fmt or {"type": "text"}}, "temperature": body.get("temperature"),
            "top_p": body.get("top_p"), "max_output_tokens": body.get("max_output_tokens"),
            "store": body.get("store") is not False, "previous_response_id": body.get("previous_response_id"),
            "metadata": body.get("metadata") or {}}


def output_history(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A response's output items as input items of the next turn (reasoning is not sent back)."""
    items = []
    for item in output:
        if item["type"] == "message":
            text = "".join(p["text"] for p in item["content"] if p.get("type") == "output_text")
            items.append({"type": "message", "role": "assistant", "content": text})
        elif item["type"] == "function_call":
            items.append({"type": "function_call", "call_id": item["call_id"], "name": item["name"],
                          "arguments": item["arguments"]})
    return items

