"""OpenAI's Responses body translated into a chat body and validated by the chat reader (pure: no I/O).

`input` (a string or items: messages, `function_call`, `function_call_output`), `instructions`,
the flat `tools`, `text.format` and `max_output_tokens` become chat's messages, tools,
response_format and max_completion_tokens; generation_requests.read then applies every chat
check and bound, and its 400s are told in the Responses field's name. A stored response's
conversation (previous_response_id) is put before the input once the route has read it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from models_registry.api.openai import generation_requests
from models_registry.api.openai.generation_bodies import MAX_MESSAGES
from models_registry.api.openai.generation_requests import GenerationRequest
from models_registry.api.pipeline.error_answers import invalid
from models_registry.core.errors import InvalidInput

# Bookkeeping and hints: accepted, no effect here (metadata is echoed).
IGNORED = ("metadata", "user", "service_tier", "prompt_cache_key", "safety_identifier", "truncation", "reasoning")
# Responses fields this server reads; the rest of OpenAI's are refused by name.
FIELDS = ("model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "text",
          "max_output_tokens", "temperature", "top_p", "stream", "store", "previous_response_id", *IGNORED)
ROLES = ("user", "assistant", "system", "developer")
TEXT_PARTS = ("input_text", "output_text", "text")
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


def read(body: Any) -> ResponsesRequest:
    """Validate a POST /v1/responses body: every chat check applies, named by the Responses field."""
    if not isinstance(body, dict):
        raise invalid('request body must be a JSON object like {"model": "...", "input": "..."}', None)
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise invalid(f"unrecognized request argument(s): {', '.join(unknown)}", unknown[0])
    items = input_items(body.get("input"))
    previous = body.get("previous_response_id")
    if previous is not None and (not isinstance(previous, str) or not previous):
        raise invalid("'previous_response_id' must be a response id (resp_...)", "previous_response_id")
    store = body.get("store")
    if store is not None and not isinstance(store, bool):
        raise invalid("'store' must be true or false", "store")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise invalid("'instructions' must be a string", "instructions")
    payload = chat_payload(body, items)
    return ResponsesRequest(chat=read_chat(payload), payload=payload, items=items, echo=echo(body),
                            store=store is not False, previous_id=previous)


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


def input_items(value: Any) -> list[dict[str, Any]]:
    """The input as Responses items: a string is one user message; each item checked and its text joined."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise invalid("'input' is required: a string or a non-empty list of items", "input")
    if len(value) > MAX_MESSAGES:
        raise invalid(f"{len(value)} input items: at most {MAX_MESSAGES}", "input")
    # A reasoning item handed back (a previous response's output as input) is not sent to the model again.
    return [_item(item, n) for n, item in enumerate(value)
            if not (isinstance(item, dict) and item.get("type") == "reasoning")]


def _item(item: Any, n: int) -> dict[str, Any]:
    where = f"input[{n}]"
    if not isinstance(item, dict):
        raise invalid(f"{where} must be an object: a message, a function_call or a function_call_output", "input")
    kind = item.get("type", "message")
    if kind == "message":
        if item.get("role") not in ROLES:
            raise invalid(f"{where}.role must be one of {', '.join(ROLES)}", "input")
        return {"type": "message", "role": item["role"], "content": _text(item.get("content"), where)}
    if kind == "function_call":
        for name in ("call_id", "name", "arguments"):
            if not isinstance(item.get(name), str) or not item[name] and name != "arguments":
                raise invalid(f"{where} is a function_call: it needs call_id, name and arguments (strings)", "input")
        return {"type": "function_call", "call_id": item["call_id"], "name": item["name"],
                "arguments": item["arguments"] or "{}"}
    if kind == "function_call_output":
        output = item.get("output")
        if not isinstance(item.get("call_id"), str) or not item["call_id"]:
            raise invalid(f"{where} is a function_call_output: it needs the call_id of the call it answers", "input")
        return {"type": "function_call_output", "call_id": item["call_id"], "output": _text(output, where)}
    raise invalid(f"{where}.type {kind!r} is not supported: message, function_call, function_call_output or "
                  "reasoning",
                  "input")


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") in TEXT_PARTS
                                         and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    raise invalid(f"{where}.content must be a string or a list of input_text parts (only text is supported)",
                  "input")


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


def chat_tools(value: Any) -> Any:
    """Responses' flat functions ({"type", "name", "description", "parameters", "strict"}) as chat's tools."""
    if not isinstance(value, list):
        return value  # the chat reader's 400
    tools = []
    for n, tool in enumerate(value):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise invalid(f"tools[{n}] must be {{\"type\": \"function\", \"name\", ...}}: only functions are "
                          "supported", "tools")
        extra = sorted(set(tool) - {"type", "name", "description", "parameters", "strict"})
        if extra:
            raise invalid(f"tools[{n}] takes no {extra[0]!r}", "tools")
        tools.append({"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}})
    return tools


def chat_tool_choice(value: dict[str, Any]) -> Any:
    """Responses' {"type": "function", "name"} as chat's {"type": "function", "function": {"name"}}."""
    if value.get("type") == "function" and isinstance(value.get("name"), str):
        return {"type": "function", "function": {"name": value["name"]}}
    if value.get("type") == "allowed_tools" or value.get("type") not in ("function", None):
        raise invalid('\'tool_choice\' must be "none", "auto", "required" or {"type": "function", "name": ...}',
                      "tool_choice")
    return value


def text_format(value: Any) -> dict[str, Any] | None:
    """text.format ({"type": "json_schema", "name", "schema", "strict"}, json_object, text) as a response_format."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"format", "verbosity"}:
        raise invalid("'text' must be an object like {\"format\": {\"type\": \"text\"}}", "text")
    fmt = value.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise invalid("'text.format' must be an object with a type: text, json_object or json_schema", "text.format")
    if fmt.get("type") != "json_schema":
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

