"""The structured-output level of `make bench-generation`: json_schema rows against free rows at 8 streams.

Both sides run back to back on the continuous-batching server, with the same closed-loop
clients, prompts and lengths as the other levels (bench.generation.level): once free, once
with a response_format whose grammar (llguidance, per row) masks every token. The schema is
an array of typed records that no answer completes within its length, so both sides generate
their full max_tokens and the tokens/s compare the mask's cost alone. Every structured answer
is checked: compact, a prefix of schema-valid JSON (or, when the grammar ended it, valid JSON).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

RECORD = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 24}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "role": {"enum": ["admin", "user", "guest"]}, "active": {"type": "boolean"},
    "email": {"type": "string", "maxLength": 40}}, "required": ["name", "age", "role", "active", "email"]}
# At least 20 records of 20 tokens or more: more than the longest answer's 256 tokens.
SCHEMA = {"type": "object", "properties": {"people": {"type": "array", "items": RECORD, "minItems": 20}},
          "required": ["people"]}
FORMAT = {"type": "json_schema", "json_schema": {"name": "people", "schema": SCHEMA, "strict": True}}
STREAMS = 8


def well_formed(text: str, finish_reason: str | None) -> bool:
    """A finished answer parses; a cut one is at least the start of the schema's compact JSON."""
    if finish_reason == "stop":
        try:
            json.loads(text)
            return True
        except ValueError:
            return False
    return text.startswith('{"people":[') and "\n" not in text


async def pair(server: Any, args: argparse.Namespace, level: Any) -> dict[str, Any]:
    """{free, structured: level results, ratio, malformed} at STREAMS streams."""
    free = await level(server, STREAMS, args)
    answers: list[tuple[str, str | None]] = []
    structured = await level(server, STREAMS, args, extra={"response_format": FORMAT}, answers=answers)
    ratio = round(structured["tokens_s"] / free["tokens_s"], 2) if free["tokens_s"] else None
    malformed = sum(not well_formed(text, reason) for text, reason in answers)
    return {"free": free, "structured": structured, "ratio": ratio, "answers": len(answers),
            "malformed": malformed}


def table(result: dict[str, Any]) -> str:
    """The markdown lines of the structured level."""
    free, structured = result["free"], result["structured"]
    return "\n".join([
        f"| rows (continuous, {STREAMS} streams) | tokens/s | TTFT p50 ms | TTFT p99 ms | requests done/started |",
        "|---|---:|---:|---:|---:|",
        f"| free | {free['tokens_s']} | {free['ttft_p50_ms']} | {free['ttft_p99_ms']} | {free['requests']} |",
        f"| json_schema | {structured['tokens_s']} | {structured['ttft_p50_ms']} | {structured['ttft_p99_ms']} | "
        f"{structured['requests']} |",
        "",
        f"json_schema / free: **{result['ratio']}x** (target >= 0.75x); structured answers checked: "
        f"{result['answers']}, malformed: {result['malformed']}."])
