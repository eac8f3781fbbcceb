"""The tools level of `make bench-generation`: forced tool calls against free rows at 8 streams.

Both sides run back to back on the continuous-batching server as chats with the same tool declared, so
their prompts are the same length: once with `tool_choice: "auto"` (the random-weight model writes no
`<tool_call>`, so its answer is free text, read for calls as it streams), once `"required"`, whose grammar
(llguidance, per row) masks every token and whose arguments stream as deltas as they are generated
(api.openai.call_scanner). The function's arguments are an array of typed records that no answer
completes within its length, so both sides generate their full max_tokens and the tokens/s compare the
forced call's cost alone (the grammar's mask, the call's scanning). Tokens/s counts, on both sides, each
chunk received (content or an arguments delta) when it comes, and the generated tokens no chunk carried
(a forced call's marker and name: some 40 tokens of this byte-level vocabulary) when the usage chunk
says them. Every forced answer is checked: its arguments a prefix of the schema's compact JSON.
"""

from __future__ import annotations

import argparse
from typing import Any

from bench.generation_structured import SCHEMA

STREAMS = 8
TOOL = {"type": "function", "function": {"name": "record_people", "description": "Record the people named.",
                                         "strict": True, "parameters": SCHEMA}}


def well_formed(text: str, finish_reason: str | None) -> bool:
    """A forced answer's joined arguments: at least the start of the schema's compact JSON, cut by its length."""
    start = '{"people":['
    prefix = text.startswith(start) or start.startswith(text)  # a short answer may end before its arguments do
    return prefix and "\n" not in text and finish_reason in ("length", "tool_calls")


async def pair(server: Any, args: argparse.Namespace, level: Any) -> dict[str, Any]:
    """{free, tools: level results, ratio, malformed} at STREAMS streams."""
    free = await level(server, STREAMS, args, extra={"tools": [TOOL], "tool_choice": "auto"}, chat=True)
    answers: list[tuple[str, str | None]] = []
    forced = await level(server, STREAMS, args, extra={"tools": [TOOL], "tool_choice": "required",
                                                       "parallel_tool_calls": False}, answers=answers, chat=True)
    ratio = round(forced["tokens_s"] / free["tokens_s"], 2) if free["tokens_s"] else None
    bad = [(text[:80], reason) for text, reason in answers if not well_formed(text, reason)]
    return {"free": free, "tools": forced, "ratio": ratio, "answers": len(answers), "malformed": len(bad),
            "malformed_examples": bad[:2]}


def table(result: dict[str, Any]) -> str:
    """The markdown lines of the tools level."""
    free, forced = result["free"], result["tools"]
    return "\n".join([
        f"| chats with a tool (continuous, {STREAMS} streams) | tokens/s | TTFT p50 ms | TTFT p99 ms | "
        "requests done/started |",
        "|---|---:|---:|---:|---:|",
        f"| tool_choice auto (free text) | {free['tokens_s']} | {free['ttft_p50_ms']} | {free['ttft_p99_ms']} | "
        f"{free['requests']} |",
        f"| tool_choice required | {forced['tokens_s']} | {forced['ttft_p50_ms']} | {forced['ttft_p99_ms']} | "
        f"{forced['requests']} |",
        "",
        f"required / free: **{result['ratio']}x** (target >= 0.75x); forced calls checked: {result['answers']}, "
        f"malformed: {result['malformed']}."])
