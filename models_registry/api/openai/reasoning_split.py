"""A reasoning model's answer split into its reasoning and its content, piece by piece (pure).

The format is a text-generation task's `reasoning_format` (its default parameter, else what the
chat template implies: core.model_layout), as vLLM's `--reasoning-parser` for the `<think>` families:
"think" for a model that writes `<think>` itself (Qwen3), "think-open" for one whose generation
prompt already opened the block (DeepSeek-R1, QwQ), so that the answer starts inside it; "none"
leaves the text alone. Only the first block is reasoning. While streaming, only a tail that could still
become a tag (or whitespace that may end the reasoning) is held back until the next piece tells.
"""

from __future__ import annotations

from dataclasses import dataclass

from models_registry.core.chat_template_formats import THINK_END as END
from models_registry.core.chat_template_formats import THINK_START as START
from models_registry.tasks.task_parameters import ReasoningFormat


@dataclass(frozen=True)
class Pieces:
    """The new reasoning and content text one piece of the answer released."""

    reasoning: str = ""
    content: str = ""


def _partial_tail(text: str, tag: str) -> int:
    """How many last characters of text could be the start of tag."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0


class ReasoningSplitter:
    """Fed the answer's text piece by piece; returns what each piece makes visible as reasoning and as content."""

    def __init__(self, reasoning_format: ReasoningFormat) -> None:
        self.format = reasoning_format
        self.state = "reasoning" if reasoning_format == "think-open" else "before"
        self.held = ""
        self.trim = self.state == "reasoning"  # leading whitespace of a part is dropped, as peers answer
        self.opening = self.state == "reasoning"  # think-open: a `<think>` the model writes again is dropped

    def feed(self, text: str) -> Pieces:
        """The reasoning and content that text (the next piece) releases."""
        if self.format == "none":
            return Pieces(content=text)
        buffer, reasoning, content = self.held + text, "", ""
        self.held = ""
        while buffer:
            if self.state == "before":
                at = buffer.find(START)
                if at < 0:
                    keep = _partial_tail(buffer, START)
                    content += buffer[:len(buffer) - keep]
                    self.held = buffer[len(buffer) - keep:]
                    break
                content += buffer[:at]
                buffer = buffer[at + len(START):]
                self.state, self.trim = "reasoning", True
            elif self.state == "reasoning":
                if self.trim:
                    buffer = buffer.lstrip()
                    if self.opening and buffer and (START.startswith(buffer) or buffer.startswith(START)):
                        if len(buffer) < len(START):
                            self.held = buffer  # could still be the `<think>` written again
                            break
                        buffer = buffer[len(START):]
                        continue
                    if not buffer:
                        break
                    self.trim = self.opening = False
                at = buffer.find(END)
                if at >= 0:
                    reasoning += buffer[:at].rstrip()
                    buffer = buffer[at + len(END):]
                    self.state, self.trim = "content", True
                    continue
                keep = _partial_tail(buffer, END)
                shown = buffer[:len(buffer) - keep].rstrip()  # trailing whitespace may end the reasoning
                reasoning += shown
                self.held = buffer[len(shown):]
                break
            else:
                if self.trim:
                    buffer = buffer.lstrip()
                    self.trim = not buffer
                content += buffer
                break
        return Pieces(reasoning, content)

    def finish(self) -> Pieces:
        """What was held back, once the answer has ended (an unclosed block is all reasoning)."""
        held, self.held = self.held, ""
        if self.state == "reasoning":
            return Pieces(reasoning=held.rstrip())
        return Pieces(content=held)
