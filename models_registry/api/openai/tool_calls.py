"""A chat answer's tool calls told from its text, piece by piece, in the model family's own format (pure).

The format is a text-generation task's `tool_call_format` (its default parameter, else what the
chat template renders: core.model_layout), as vLLM's `--tool-call-parser`:
"hermes" (Hermes, Qwen): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, several in a row,
text around them is content; "mistral": `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`, text
before the marker is content; "llama3-json": the whole answer is `{"name": ..., "parameters": {...}}`
(several joined by `;`), optionally after `<|python_tag|>`. The worker leaves special tokens out of the
text, so where `[TOOL_CALLS]` or `<|python_tag|>` is one, an answer that starts with `[` (mistral) or `{`
(llama3-json) is read as the calls it would introduce. A call that does not parse is content, as written.
While streaming, text that could still become a marker is held back. A call's deltas are OpenAI's: its
opening (index, id, type, name, empty arguments), then its arguments. A forced call (tool_choice
"required" or a named function: api.openai.tool_grammar) is the grammar's text, so it always parses: its
opening goes out once its name is read and its arguments piece by piece as generated
(api.openai.call_scanner), exactly as the model writes them, whole answer and stream alike (a call cut
by max_tokens is the part written, with finish_reason "length", as OpenAI's). A call the model chose
(tool_choice "auto") goes out whole once it has closed: until then it may turn out not to parse, and
then it is content, which pieces already sent could not become. A call's id is OpenAI's `call_...`,
except for mistral, whose templates take back only 9-character ids (as vLLM's).
"""

from __future__ import annotations

import json
import secrets
import string
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from models_registry.api.openai.call_scanner import CallScanner
from models_registry.core.chat_template_formats import MISTRAL_TOOL_CALLS, PYTHON_TAG, TOOL_CALL_CLOSE, TOOL_CALL_OPEN
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


def opening_delta(index: int, call_id: str, name: str) -> dict[str, Any]:
    """A streamed call's first delta, as OpenAI sends it: its index, id, type and name, and empty arguments."""
    return {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}


def arguments_delta(index: int, arguments: str) -> dict[str, Any]:
    """A streamed call's next piece of arguments."""
    return {"index": index, "function": {"arguments": arguments}}


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
        opening = opening_delta(index, self.id, self.name)
        return [opening, arguments_delta(index, self.arguments)] if self.arguments else [opening]


@dataclass(frozen=True)
class Found:
    """What one piece of the answer released: content text, the calls completed in it, and their stream deltas."""

    content: str = ""
    calls: tuple[ToolCall, ...] = ()
    deltas: tuple[dict[str, Any], ...] = ()  # what a stream sends of the calls now (a forced one: as it comes)

    def __add__(self, other: Found) -> Found:
        return Found(self.content + other.content, self.calls + other.calls, self.deltas + other.deltas)


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

    parallel false keeps the first call only (OpenAI's parallel_tool_calls); forced: the answer is a forced
    call's grammar's text, whose calls are streamed as they come.
    """

    def __init__(self, tool_format: ToolCallFormat, parallel: bool = True, forced: bool = False) -> None:
        self.format = tool_format
        self.parallel = parallel
        self.forced = forced and tool_format != "none"
        self.marker = MARKERS.get(tool_format, "")
        self.state = "start"  # start: nothing but whitespace yet; text; call: inside a call (or held to the end)
        self.held = ""
        self.gap = ""  # the whitespace before the marker of the call being read: content again if it is no call
        self.made = 0
        self.scanner: CallScanner | None = None  # a forced answer's call being read
        self.call_id = ""  # its id
        self.make_id = mistral_call_id if tool_format == "mistral" else new_call_id

    def feed(self, text: str) -> Found:
        """The content and calls that text (the next piece) releases."""
        if self.format == "none":
            return Found(content=text)
        if self.forced:
            return self._forced(text)
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
        if self.forced:
            return self._forced_end(held)
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
        return self._kept(calls)

    def _kept(self, calls: list[ToolCall]) -> Found:
        """The calls a closed region holds, as many as parallel_tool_calls allows, with their deltas (whole)."""
        kept = calls if self.parallel else calls[:max(0, 1 - self.made)]
        deltas = tuple(d for k, call in enumerate(kept) for d in call.deltas(self.made + k))
        self.made += len(kept)
        return Found(calls=tuple(kept), deltas=deltas)

    def _forced(self, text: str) -> Found:
        """A forced answer's next piece: each call opened once its name is read, its arguments as they come.

        Between calls is the grammar's punctuation (markers, newlines, `[`, `,`, `;`): held, and dropped at the
        next call; any other text there (a worker that did not apply the grammar) is content, as written.
        """
        found = Found()
        while text:
            if self.scanner is None:
                if self.made and not self.parallel:
                    return found  # one call only: what follows it is not read
                start = text.find("{")
                if start < 0:
                    self.held += text
                    return found
                between, self.held = self.held + text[:start], ""
                found += Found(content=_unmarked(between))
                self.scanner, self.call_id, text = CallScanner(), self.make_id(), text[start:]
            read = self.scanner.feed(text)
            if read.name is not None:
                found += Found(deltas=(opening_delta(self.made, self.call_id, read.name),))
            if read.arguments:
                found += Found(deltas=(arguments_delta(self.made, read.arguments),))
            if read.rest is None:
                return found
            found += self._forced_call()
            text = read.rest
        return found

    def _forced_call(self) -> Found:
        """The call the scanner read (its deltas already sent), or where it never showed a name its text read whole."""
        scanner, self.scanner = self.scanner, None
        assert scanner is not None
        if scanner.name is not None:
            self.made += 1
            return Found(calls=(ToolCall(scanner.name, scanner.arguments, self.call_id),))
        calls = calls_of(scanner.text, self.format)
        return Found(content=scanner.text) if calls is None else self._kept(calls)

    def _forced_end(self, held: str) -> Found:
        """A forced answer's end: a call cut short is what it released (OpenAI's finish_reason "length").

        One cut before its name was read released nothing and is dropped: it is the grammar's call, never content.
        """
        if self.scanner is not None and self.scanner.name is not None:
            return self._forced_call()
        self.scanner = None
        return Found(content=_unmarked(held))


def _unmarked(text: str) -> str:
    """The text between a forced answer's calls less the grammar's markers and punctuation."""
    for marker in (HERMES_OPEN, HERMES_CLOSE, MISTRAL_MARKER, PYTHON_TAG):
        text = text.replace(marker, "")
    return text.strip(" \t\r\n[],;")


@dataclass(frozen=True)
class Parsed:
    """A whole answer's content (None where only calls were made) and calls."""

    content: str | None
    calls: list[ToolCall]


def parse(text: str, tool_format: ToolCallFormat, parallel: bool = True, forced: bool = False) -> Parsed:
    """A whole answer's content and calls (what the stream of it releases, at once)."""
    stream = ToolCallStream(tool_format, parallel, forced)
    found = stream.feed(text) + stream.finish()
    return Parsed(found.content if found.content.strip() or not found.calls else None, list(found.calls))
