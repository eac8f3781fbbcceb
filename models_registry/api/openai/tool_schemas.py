"""OpenAI's tools, tool_choice and parallel_tool_calls read, and the tool turns of a conversation (pure).

Their shapes are api.openai.generation_bodies'; here what no shape says, each a 400 naming its
field: names declared once, a named choice among them, calls on assistant turns only. The
functions' parameter schemas are bounded as a response_format schema is (tasks.schema_bounds, on
the event loop): all of them together, as the one schema of a call ({"name": one of the names,
"arguments": that function's parameters}), which is also what a forced call's grammar is compiled
from (api.openai.tool_grammar). Assistant turns' `tool_calls` reach the chat template as
transformers documents them, with the arguments decoded into an object; a `tool` turn keeps its
`tool_call_id` (and `name`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import orjson

from models_registry.api.pipeline.error_answers import invalid
from models_registry.core.errors import InvalidInput
from models_registry.tasks.schema_bounds import SchemaError, canonical, closed
from models_registry.tasks.schema_instances import no_finite_instance

MAX_TOOLS = 128  # OpenAI's limit
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # OpenAI's function names (and a dot, which some models use)
FIELDS = ("tools", "tool_choice", "parallel_tool_calls")
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
VALUES = ("enum", "const", "default", "examples", "required")  # keys of a schema whose values are data


@dataclass(frozen=True)
class ToolRequest:
    """A chat request's tools: what the template renders, which call is forced, and how many calls at most."""

    tools: list[dict[str, Any]]  # OpenAI's {"type": "function", "function": {...}}, as the chat template takes them
    choice: str  # "none", "auto", "required", or the name of the function that must be called
    parallel: bool

    @property
    def names(self) -> list[str]:
        """The declared functions' names, in order."""
        return [t["function"]["name"] for t in self.tools]

    @property
    def forced(self) -> bool:
        """Whether the answer must be a call (tool_choice required or a named function): a grammar says so."""
        return self.choice not in ("none", "auto")


def read_tools(body: dict[str, Any]) -> ToolRequest | None:
    """A validated chat body's tools (api.openai.generation_bodies); None where it declares none (or tool_choice is
    none: nothing is rendered or parsed). 400 for what no shape says: a name declared twice, a choice of none."""
    tools = _tools(body.get("tools") or [])
    choice = _choice(body.get("tool_choice"), [t["function"]["name"] for t in tools])
    if not tools:
        if choice not in (None, "none", "auto"):
            raise invalid("'tool_choice' needs 'tools': declare the functions the model may call", "tool_choice")
        return None
    if choice == "none":
        return None
    call_schema(tools)  # bounded on the loop, all of them together: a fast 400 naming tools
    return ToolRequest(tools, choice or "auto", body.get("parallel_tool_calls") is not False)


def call_schema(tools: list[dict[str, Any]], arguments_key: str = "arguments", only: str | None = None,
                at: str = "") -> str:
    """The canonical schema of one call of the tools (of the function `only`, when named); a 400 over the bounds.

    Each function's parameters sit inside the call's schema (itself at JSON pointer `at` of the grammar's
    schema), so their local `$ref`s (pydantic's `#/$defs/...`, `#` itself) are re-rooted to where they sit.
    """
    chosen = [t["function"] for t in tools if only is None or t["function"]["name"] == only]
    try:
        branches = [{"type": "object", "properties": {"name": {"const": function["name"]}, arguments_key: rerooted(
            _parameters(function), at + (f"/anyOf/{b}" if len(chosen) > 1 else "") + f"/properties/{arguments_key}")},
                     "required": ["name", arguments_key], "additionalProperties": False}
                    for b, function in enumerate(chosen)]
        return canonical({"anyOf": branches} if len(branches) > 1 else branches[0])
    except SchemaError as error:
        raise invalid(f"the tools' parameter schemas cannot be used: {error}", "tools") from None


def rerooted(schema: Any, at: str) -> Any:
    """schema with its local $refs ("#...") pointing into it where it sits at JSON pointer `at` of another schema."""
    if isinstance(schema, list):
        return [rerooted(sub, at) for sub in schema]
    if not isinstance(schema, dict):
        return schema
    moved: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str) and value.startswith("#"):
            moved[key] = "#" + at + value[1:]
        elif key in VALUES:  # data, not subschemas: a "$ref" in them is a value as sent
            moved[key] = value
        else:
            moved[key] = rerooted(value, at)
    return moved


def forced_field(tools: ToolRequest) -> str:
    """The field a forced call's grammar refusal names: the one function's parameters it forces, else tools."""
    names = tools.names
    if tools.choice in names:
        return parameters_field(names.index(tools.choice))
    return parameters_field(0) if len(names) == 1 else "tools"


def parameters_field(n: int) -> str:
    """The request field of tools[n]'s parameters schema (OpenAI's `param`)."""
    return f"tools[{n}].function.parameters"


def _checked_parameters(parameters: dict[str, Any], n: int) -> None:
    """A 400 naming tools[n].function.parameters where the schema is over the bounds or describes no finite JSON."""
    try:
        problem = no_finite_instance(orjson.loads(canonical(parameters)))
    except SchemaError as error:
        problem = str(error)
    if problem:
        raise invalid(f"{parameters_field(n)} cannot be used: {problem}", parameters_field(n))


def _parameters(function: dict[str, Any]) -> Any:
    """A function's parameters schema; strict (OpenAI's function.strict): objects take no undeclared properties."""
    parameters = function.get("parameters", NO_PARAMETERS)
    return closed(parameters) if function.get("strict") else parameters


def _tools(value: list[dict[str, Any]]) -> list[dict[str, Any]]:
    tools, names = [], set()
    for n, tool in enumerate(value):
        name = tool["function"]["name"]
        if name in names:
            raise invalid(f"tools[{n}].function.name {name!r} is declared twice", "tools")
        names.add(name)
        function = tool["function"]
        if function.get("parameters") is not None:
            _checked_parameters(function["parameters"], n)
        shaped = {k: v for k, v in function.items() if v is not None}
        shaped.setdefault("parameters", NO_PARAMETERS)
        tools.append({"type": "function", "function": shaped})
    return tools


def _choice(value: str | dict[str, Any] | None, names: list[str]) -> str | None:
    if not isinstance(value, dict):
        return value
    name = value["function"]["name"]
    if name not in names:
        raise invalid(f"'tool_choice' names {name!r}, which is not one of the tools", "tool_choice")
    return name


def tool_turn(message: dict[str, Any], n: int) -> dict[str, Any]:
    """The tool fields of a validated messages[n] as the chat template takes them: an assistant's calls, a tool
    result's id; 400 for a role they do not belong to."""
    role, extra = message["role"], {}
    calls = message.get("tool_calls")
    if calls is not None:
        if role != "assistant":
            raise invalid(f"messages[{n}].tool_calls must be on an assistant message", "messages")
        extra["tool_calls"] = [_template_call(call, n, k) for k, call in enumerate(calls)]
    if role == "tool":
        if not message.get("tool_call_id"):
            raise invalid(f"messages[{n}] is a tool result: it needs the tool_call_id of the call it answers",
                          "messages")
        extra["tool_call_id"] = message["tool_call_id"]
        if "name" in message:
            extra["name"] = message["name"]
    return extra


def with_result_names(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """messages, each tool result without a name given the name of the call it answers (templates that read it)."""
    names = {call["id"]: call["function"]["name"] for m in messages for call in m.get("tool_calls", ()) if "id" in call}
    return [{**m, "name": names[m["tool_call_id"]]} if m.get("role") == "tool" and "name" not in m
            and m.get("tool_call_id") in names else m for m in messages]


def _template_call(call: dict[str, Any], n: int, k: int) -> dict[str, Any]:
    """One validated call of an assistant turn, its arguments decoded (transformers' templates read an object)."""
    function = call["function"]
    arguments = function.get("arguments", "{}")
    try:
        decoded = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        decoded = None
    if not isinstance(decoded, dict):
        raise invalid(f"messages[{n}].tool_calls[{k}].function.arguments must be a JSON object as text", "messages")
    shaped = {"type": "function", "function": {"name": function["name"], "arguments": decoded}}
    if "id" in call:
        shaped["id"] = call["id"]
    return shaped


def unusable(reason: str) -> InvalidInput:
    """The 400 for tools this model cannot take (its chat template, its format), naming tools."""
    return invalid(reason, "tools")
