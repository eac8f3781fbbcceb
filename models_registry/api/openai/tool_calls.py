"""A chat answer's tool calls told from its text, piece by piece, in the model family's own format (pure).

The format is a text-generation task's `tool_call_format` (its default parameter, else what the
chat template renders: core.model_layout), as vLLM's `--tool-call-parser`:
"hermes" (Hermes, Qwen): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, several in a row,
text around them is content; "mistral": `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`, text
before the marker is content; "llama3-json": the whole answer is `{"name": ..., "parameters": {...}}`
(several joined by `;`), optionally after `<|python_tag|>`. The worker leaves special tokens out of the
text, so where `[TOOL_CALLS]` or `<|python_tag|>` is one, an answer that starts with `[` (mistral) or `{`
(llama3-json) is read as the calls it would introduce. A call that does not parse is content, as written.
While streaming, text that could still become a marker is held back, and a call goes out once it is
whole: its opening delta (index, id, type, name, empty arguments), then its arguments. A call's id is
OpenAI's `call_...`, except for mistral, whose templates take back only 9-character ids (as vLLM's).
"""

from __future__ import annotations

import json
import secrets
import string
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from models_registry.core.model_layout import MISTRAL_TOOL_CALLS, PYTHON_TAG, TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from models_registry.tasks.task_parameters import ToolCallFormat

HERMES_OPEN, HERMES_CLOSE, MISTRAL_MARKER = TOOL_CALL_OPEN, TOOL_CALL_CLOSE, MISTRAL_TOOL_CALLS
# The marker that opens calls anywhere in the text, and the first character that opens them at its start
# (where the marker is a special token the worker left out).
MARKERS: dict[str, str] = {"hermes": HERMES_OPEN, "mistral": MISTRAL_MARKER, "llama3-json": PYTHON_TAG}
BARE_STARTS: dict[str, str] = {"mistral": "[", "llama3-json": "{"}


def new_call_id() -> str:
    """An OpenAI-style call id: call_ and 24 random hex digits."""
    return "call_" + uuid.uuid4().hex[:24]


def mistral_call_id() -> str:
    """A Mistral call id: 9 letters and digits, the only ids Mistral's chat templates take back in a tool turn."""
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(9))


@dataclass(frozen=True)
class ToolCall:
    """One call the model made: the function's name and its arguments as JSON text."""

    name: str
    arguments: str
    id: str = field(default_factory=new_call_id)

    def shaped(self) -> dict[str, Any]:
        """The call in a whole answer's message.tool_calls."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    def deltas(self, index: int) -> list[dict[str, Any]]:
        """The call streamed, as OpenAI sends it: its opening (id, type, name, empty arguments), then the arguments."""
        opening = {"index": index, "id": self.id, "type": "function",
                   "function": {"name": self.name, "arguments": ""}}
        return [opening, {"index": index, "function": {"arguments": self.arguments}}] if self.arguments else [opening]


@dataclass(frozen=True)
class Found:
    """What one piece of the answer released: content text, and the calls completed in it."""

    content: str = ""
    calls: tuple[ToolCall, ...] = ()

    def __add__(self, other: Found) -> Found:
        return Found(self.content + other.content, self.calls + other.calls)


def call_of(value: Any, arguments_key: str = "arguments", make_id: Callable[[], str] = new_call_id) -> ToolCall | None:
    """The call a decoded JSON object names ({"name", "arguments"}, or llama3's "parameters"); None if it is not one."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        return None
    arguments = value.get(arguments_key, value.get("arguments", value.get("parameters", {})))
    if isinstance(arguments, str):  # some models write the arguments as JSON text already
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ToolCall(value["name"], json.dumps(arguments, ensure_ascii=False), make_id())


def _json_values(text: str) -> list[Any] | None:
    """The JSON values text holds one after another (separated by whitespace or `;`); None unless all of it is JSON."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while True:
        while at < len(text) and (text[at].isspace() or (values and text[at] == ";")):
            at += 1
        if at >= len(text):
            return values
        try:
            value, at = decoder.raw_decode(text, at)
        except ValueError:
            return None
        values.append(value)


def calls_of(body: str, tool_format: ToolCallFormat) -> list[ToolCall] | None:
    """The calls the text after a marker (or a bare start) holds; None where it is not wholly calls."""
    values = _json_values(body.strip())
    if not values:
        return None
    if tool_format == "mistral" and len(values) == 1 and isinstance(values[0], list):
        values = values[0]
    key = "parameters" if tool_format == "llama3-json" else "arguments"
    make_id = mistral_call_id if tool_format == "mistral" else new_call_id
    calls = [call_of(v, key, make_id) for v in values]
    return None if not calls or any(c is None for c in calls) else calls  # type: ignore[return-value]


def _partial_tail(text: str, tag: str) -> int:
    """How many last characters of text could be the start of tag."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0


class ToolCallStream:
    """Fed the answer's content piece by piece; returns what each piece makes visible as content and as calls.

    parallel false keeps the first call only (OpenAI's parallel_tool_calls).
    """

    def __init__(self, tool_format: ToolCallFormat, parallel: bool = True) -> None:
        self.format = tool_format
        self.parallel = parallel
        self.marker = MARKERS.get(tool_format, "")
        self.state = "start"  # start: nothing but whitespace yet; text; call: inside a call (or held to the end)
        self.held = ""
        self.gap = ""  # the whitespace before the marker of the call being read: content again if it is no call
        self.made = 0

    def feed(self, text: str) -> Found:
        """The content and calls that text (the next piece) releases."""
        if self.format == "none":
            return Found(content=text)
        buffer, found = self.held + text, Found()
        self.held = ""
        while buffer:
            if self.state == "start":
                stripped = buffer.lstrip()
                if not stripped:
                    self.held = buffer
                    break
                bare = BARE_STARTS.get(self.format)
                if bare and stripped.startswith(bare):
                    self.held, self.state = buffer, "call"  # the whole answer may be calls: held to the end
                    break
                self.state = "text"
            elif self.state == "text":
                at = buffer.find(self.marker)
                if at < 0:  # trailing whitespace is held too: before a call or after the last one it is dropped
                    keep = _partial_tail(buffer, self.marker)
                    shown = buffer[:len(buffer) - keep].rstrip()
                    found += Found(content=shown)
                    self.held = buffer[len(shown):]
                    break
                before = buffer[:at]
                found += Found(content=before.rstrip())
                self.gap = before[len(before.rstrip()):]
                self.held, buffer, self.state = buffer[at:at + len(self.marker)], buffer[at + len(self.marker):], "call"
            else:
                if self.format != "hermes":  # the calls run to the end of the answer
                    self.held += buffer
                    break
                end = (self.held + buffer).find(HERMES_CLOSE)
                if end < 0:
                    self.held += buffer
                    break
                whole, self.held = self.held + buffer, ""
                closed = self._closed(whole[:end + len(HERMES_CLOSE)])
                found += closed
                rest = whole[end + len(HERMES_CLOSE):]
                buffer, self.state = rest if closed.content else rest.lstrip(), "text"  # after a call: no gap
        return found

    def finish(self) -> Found:
        """What was held back, once the answer has ended: the calls it holds, else its text as content."""
        held, self.held = self.held, ""
        if self.state == "call" and self.format != "hermes":
            return self._closed(held)
        if self.made and not held.strip():
            return Found()
        return Found(content=held)  # an unclosed hermes call, a partial marker: text as the model wrote it

    def _closed(self, region: str) -> Found:
        """A call region (its markers included) as calls, or as the text it is where it is not wholly calls."""
        body = region.strip()
        if self.format == "hermes":
            body = body[len(HERMES_OPEN):-len(HERMES_CLOSE)]
        elif body.startswith(self.marker):
            body = body[len(self.marker):]
        calls, gap, self.gap = calls_of(body, self.format), self.gap, ""
        if calls is None:
            return Found(content=gap + region)
        kept = calls if self.parallel else calls[:max(0, 1 - self.made)]
        self.made += len(kept)
        return Found(calls=tuple(kept))


@dataclass(frozen=True)
class Parsed:
    """A whole answer's content (None where only calls were made) and calls."""

    content: str | None
    calls: list[ToolCall]


def parse(text: str, tool_format: ToolCallFormat, parallel: bool = True) -> Parsed:
    """A whole answer's content and calls (what the stream of it releases, at once)."""
    stream = ToolCallStream(tool_format, parallel)
    found = stream.feed(text) + stream.finish()
    return Parsed(found.content if found.content.strip() or not found.calls else None, list(found.calls))
