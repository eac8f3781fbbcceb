"""Where one tool call's name and arguments lie in its JSON object's text, read piece by piece as generated (pure).

Fed the call object's text from its `{` (`{"name": ..., "arguments": {...}}`, llama3's "parameters" too),
it tells the name once the head up to the arguments' value is read, then each piece of the arguments'
value as it comes, up to its closing brace or bracket, then the text after the call object. Braces and
brackets are counted outside JSON strings (escapes included), so the arguments end exactly where the
model closed them, and joined the pieces are the arguments as the model wrote them. A call whose head
is some other shape (arguments before the name, arguments as a string) releases nothing: its whole text
is read once it has closed (api.openai.tool_calls).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

# The call object's head: its name, then the arguments key, up to where an object or array value starts.
HEAD = re.compile(r'\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=[{\[])')


class JsonSpan:
    """Fed a JSON object or array piece by piece from its first character; tells where it closes."""

    def __init__(self) -> None:
        self.depth = 0
        self.in_string = False
        self.escaped = False
        self.closed = False

    def feed(self, text: str) -> int:
        """How many characters of text are still inside the value (all of them while it stays open)."""
        if self.closed:
            return 0
        for at, char in enumerate(text):
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif char == "\\":
                    self.escaped = True
                elif char == '"':
                    self.in_string = False
            elif char == '"':
                self.in_string = True
            elif char in "{[":
                self.depth += 1
            elif char in "}]":
                self.depth -= 1
                if self.depth <= 0:
                    self.closed = True
                    return at + 1
        return len(text)


@dataclass(frozen=True)
class Read:
    """What one piece of a call object released."""

    name: str | None = None  # the call's name, in the piece that completed its head
    arguments: str = ""  # the arguments' text this piece released
    rest: str | None = None  # the text after the call object, once it has closed in this piece


class CallScanner:
    """Fed one call object's text from its `{`: its name once read, then its arguments as they come."""

    def __init__(self) -> None:
        self.text = ""  # the call object's text so far
        self.name: str | None = None
        self.arguments = ""  # the arguments' text released so far
        self.call = JsonSpan()
        self.value = JsonSpan()

    @property
    def closed(self) -> bool:
        """Whether the call object has closed."""
        return self.call.closed

    def feed(self, text: str) -> Read:
        """What text (the next piece of the call object, and maybe what follows it) releases."""
        inside = self.call.feed(text)
        piece, rest = text[:inside], text[inside:] if self.call.closed else None
        self.text += piece
        name = None
        if self.name is None:
            match = HEAD.match(self.text)
            if match is None:
                return Read(rest=rest)
            self.name = name = _string(match.group(1))
            piece = self.text[match.end():]
        released = piece[:self.value.feed(piece)]
        self.arguments += released
        return Read(name, released, rest)


def _string(body: str) -> str:
    """A JSON string's body decoded (as written, where its escapes are not JSON's)."""
    try:
        return str(json.loads(f'"{body}"'))
    except ValueError:
        return body
