"""A forced tool call as a grammar: tool_choice "required" or a named function, in the model's own format.

The grammar (llguidance's Lark with an inline `%json` schema) makes the answer exactly what the
format's parser reads (api.openai.tool_calls): hermes `<tool_call>\\n{call}\\n</tool_call>` (several,
one per line, where parallel calls are allowed), mistral `[TOOL_CALLS][{call}, ...]`, llama3-json
`{"name", "parameters"}` (several joined by "; "). A call is {"name": one of the functions (the named
one only, when named), "arguments": that function's parameters schema}, compact as response_format's
JSON. So even a random-weight model answers a call whose arguments are valid for the schema. The source
is compiled off the event loop, cached and bounded as a response_format schema is (api.openai.structured_output):
the bounds were checked on the loop (api.openai.tool_schemas), the rest (no finite instance, the
engine's compile, its probe) in the pool.
"""

from __future__ import annotations

from typing import Any

import llguidance
import orjson

from models_registry.api.openai.tool_calls import HERMES_CLOSE, HERMES_OPEN, MISTRAL_MARKER, ToolCallFormat
from models_registry.api.openai.tool_schemas import ToolRequest, call_schema
from models_registry.tasks.json_grammar import COMPACT, checked



def grammar_source(tools: ToolRequest, tool_format: ToolCallFormat) -> str:
    """The text a forced call's grammar is compiled from (and cached by): the format, the parallelism, the schema."""
    key = "parameters" if tool_format == "llama3-json" else "arguments"
    schema = call_schema(tools.tools, key, None if tools.choice == "required" else tools.choice,
                         "/items" if tool_format == "mistral" else "")  # mistral's calls are an array's items
    return orjson.dumps({"format": tool_format, "parallel": tools.parallel}).decode()[:-1] + f',"schema":{schema}}}'


def lark_of(tool_format: str, parallel: bool, schema: dict[str, Any]) -> str:
    """The Lark grammar of calls in tool_format."""
    if tool_format == "mistral":
        calls: dict[str, Any] = {"type": "array", "items": schema, "minItems": 1, "x-guidance": COMPACT}
        if not parallel:
            calls["maxItems"] = 1
        return f"start: {_literal(MISTRAL_MARKER)} %json {orjson.dumps(calls).decode()}\n"
    call = orjson.dumps({**schema, "x-guidance": COMPACT}).decode()
    if tool_format == "hermes":
        rule = f"call: {_literal(HERMES_OPEN + chr(10))} %json {call} {_literal(chr(10) + HERMES_CLOSE)}\n"
        return ('start: call ("\\n" call)*\n' if parallel else "start: call\n") + rule
    return ('start: call ("; " call)*\n' if parallel else "start: call\n") + f"call: %json {call}\n"


def compile_source(text: str) -> str:
    """The grammar of a grammar_source text; SchemaError when it cannot be used (blocks: run it off the loop)."""
    source = orjson.loads(text)
    return checked(source["schema"], lambda: llguidance.LLMatcher.grammar_from_lark(
        lark_of(source["format"], source["parallel"], source["schema"])))


def _literal(text: str) -> str:
    """text as a Lark string literal."""
    return orjson.dumps(text).decode()
