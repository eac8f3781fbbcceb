"""One tool call's arguments streamed as they are generated, as OpenAI sends them (pure).

Fed the text of a call's JSON object (`{"name": ..., "arguments": {...}}`, what follows a hermes
`<tool_call>` or a forced call's grammar) piece by piece: once the name is read it releases the call's
opening delta (index, id, type, name, empty arguments), then each piece of the arguments object as it
comes, up to its closing brace. Braces are counted outside JSON strings, so the arguments end exactly
where the model closed them; joined, the pieces are the arguments the model wrote.
"""

from __future__ import annotations

import re
from typing import Any

from models_registry.api.openai.tool_calls import new_call_id

# The call object's head: its name, then the arguments key (llama3's "parameters" too), up to the value.
HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=\{)')


class ArgumentsStream:
    """Fed a call object's text piece by piece; returns the stream deltas each piece releases."""

    def __init__(self, index: int, call_id: str | None = None) -> None:
        self.index = index
        self.id = call_id or new_call_id()
        self.head = ""  # the text before the arguments value, while its name is not read yet
        self.name: str | None = None
        self.depth = 0
        self.in_string = False
        self.escaped = False
        self.done = False  # the arguments object has closed: what follows is no argument

    def feed(self, text: str) -> list[dict[str, Any]]:
        """The deltas text (the next piece of the call object) releases."""
        deltas: list[dict[str, Any]] = []
        if self.done or not text:
            return deltas
        if self.name is None:
            self.head += text
            match = HEAD.match(self.head)
            if match is None:
                return deltas
            self.name, text, self.head = match.group(1), self.head[match.end():], ""
            deltas.append({"index": self.index, "id": self.id, "type": "function",
                           "function": {"name": self.name, "arguments": ""}})
        piece = self._arguments_part(text)
        if piece:
            deltas.append({"index": self.index, "function": {"arguments": piece}})
        return deltas

    def _arguments_part(self, text: str) -> str:
        """The part of text that is still the arguments object (to its closing brace)."""
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
            elif char == "{":
                self.depth += 1
            elif char == "}":
                self.depth -= 1
                if self.depth == 0:
                    self.done = True
                    return text[:at + 1]
        return text
