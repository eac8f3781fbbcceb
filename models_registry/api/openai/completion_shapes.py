"""OpenAI's chat and completions answers and stream chunks, and where a stop sequence cuts the text (pure)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from models_registry.api.openai.logprob_shapes import Released, TokenLogprob, chat_logprobs, completion_logprobs
from models_registry.api.openai.tool_calls import ToolCall, ToolCallStream
from models_registry.api.openai.reasoning_split import Pieces, ReasoningSplitter
from models_registry.core import token_events

# The worker's finish reasons (core.token_events) in OpenAI's words.
FINISH_REASONS = {"eos_token": "stop", "stop_sequence": "stop", "length": "length"}


def visible(text: str, stops: list[str], final: bool) -> tuple[str, bool]:
    """(the text a client may see so far, whether a stop sequence ended it).

    OpenAI leaves the stop sequence out; while generating, a tail that may become a stop
    sequence is held back until the next tokens tell.
    """
    cuts = [at for at in (text.find(stop) for stop in stops) if at >= 0]
    if cuts:
        return text[:min(cuts)], True
    if final:
        return text, False
    held = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), held, -1):
            if text.endswith(stop[:size]):
                held = size
                break
    return text[:len(text) - held], False


@dataclass
class Choice:
    """What one choice has generated and shown so far."""

    index: int
    stops: list[str]
    text: str = ""  # the worker's text so far
    shown: int = 0  # characters of it already sent
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    logprobs: Released | None = None  # each token's logprob entry, when asked for
    cut: bool = False  # a stop sequence ended it: what follows it is not shown
    splitter: ReasoningSplitter | None = None  # a chat answer's reasoning apart from its content
    reasoning: str = ""  # the reasoning released so far (with a splitter)
    said: str = ""  # the content released so far (with a splitter or a caller)
    caller: ToolCallStream | None = None  # a chat answer's tool calls apart from its content (after the reasoning)
    calls: list[ToolCall] = field(default_factory=list)  # the calls released so far (with a caller)
    call_deltas: list[dict[str, Any]] = field(default_factory=list)  # their stream deltas not yet sent

    def take(self, event: dict[str, Any]) -> Pieces:
        """Add one worker event; the new reasoning and content the client may see now (new calls: new_calls)."""
        finished = self.finish_reason is not None
        new = self._take(event)
        ended = self.finish_reason is not None and not finished
        if self.splitter is None and self.caller is None:
            return Pieces(content=new)
        pieces = Pieces(content=new) if self.splitter is None else self.splitter.feed(new)
        if self.splitter is not None and ended:  # the held tail goes out with the last piece
            rest = self.splitter.finish()
            pieces = Pieces(pieces.reasoning + rest.reasoning, pieces.content + rest.content)
        if self.caller is not None:  # the reasoning is never read for calls: only the content
            found = self.caller.feed(pieces.content)
            if ended:
                found += self.caller.finish()
            self.calls.extend(found.calls)
            self.call_deltas.extend(found.deltas)
            pieces = Pieces(pieces.reasoning, found.content)
            if ended and self.calls and self.finish_reason == "stop":
                self.finish_reason = "tool_calls"
        self.reasoning += pieces.reasoning
        self.said += pieces.content
        return pieces

    def _take(self, event: token_events.Event) -> str:
        token = token_events.token_of(event)
        if token is not None and self.logprobs is not None:
            entry = TokenLogprob.of(token, len(self.text))
            if entry is not None:
                self.logprobs.entries.append(entry)
        self.text = token_events.text_after(self.text, event)
        summary = token_events.summary(event)
        shown, stopped = visible(self.text, self.stops, summary is not None)
        self.cut = self.cut or stopped
        if stopped:
            self.finish_reason = "stop"
        elif summary is not None:
            self.finish_reason = FINISH_REASONS.get(summary["finish_reason"], "stop")
        if summary is not None:
            self.prompt_tokens = int(summary["input_length"] or self.prompt_tokens)
            self.completion_tokens = int(summary["generated_tokens"] or self.completion_tokens)
        new = shown[self.shown:] if len(shown) > self.shown else ""
        self.shown = max(self.shown, len(shown))
        return new

    @property
    def content(self) -> str:
        """The text the client gets (with a splitter or caller: once the choice has ended, what is neither reasoning
        nor calls)."""
        return self.said if self.splitter is not None or self.caller is not None else visible(self.text, self.stops,
                                                                                              True)[0]

    def new_calls(self) -> list[dict[str, Any]]:
        """The stream deltas of the calls released since the last call (api.openai.tool_calls: a forced call's
        opening and arguments as they come, a chosen one's whole)."""
        deltas, self.call_deltas = self.call_deltas, []
        return deltas

    def new_logprobs(self) -> list[TokenLogprob] | None:
        """The logprob entries of the text shown since the last call (all that are left once it ended)."""
        if self.logprobs is None:
            return None
        return self.logprobs.upto(self.shown, everything=self.finish_reason is not None and not self.cut)

    def all_logprobs(self) -> list[TokenLogprob] | None:
        """The logprob entries of the whole content."""
        if self.logprobs is None:
            return None
        shown = len(visible(self.text, self.stops, True)[0])
        return [e for e in self.logprobs.entries if not self.cut or e.start < shown]


@dataclass
class Shaper:
    """The ids and shapes of one chat or completions answer."""

    chat: bool
    model: str
    n: int  # choices per prompt: the prompt's tokens count once
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: int = field(default_factory=lambda: int(time.time()))

    def usage(self, choices: list[Choice]) -> dict[str, int]:
        """OpenAI's usage: each prompt once, every generated token."""
        prompt = sum(c.prompt_tokens for c in choices if c.index % self.n == 0)
        completion = sum(c.completion_tokens for c in choices)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def answer(self, choices: list[Choice]) -> dict[str, Any]:
        """The whole (not streamed) answer."""
        if self.chat:
            shaped = [{"index": c.index, "message": _message(c), "logprobs": self._logprobs(c.all_logprobs()),
                       "finish_reason": c.finish_reason or "length"} for c in choices]
        else:
            shaped = [{"index": c.index, "text": c.content, "logprobs": self._logprobs(c.all_logprobs()),
                       "finish_reason": c.finish_reason or "length"} for c in choices]
        return {"id": self._id(), "object": "chat.completion" if self.chat else "text_completion",
                "created": self.created, "model": self.model, "choices": shaped, "usage": self.usage(choices)}

    def chunk(self, index: int, text: str | None, finish_reason: str | None, usage: bool,
              logprobs: list[TokenLogprob] | None = None, reasoning: str = "",
              call: dict[str, Any] | None = None) -> dict[str, Any]:
        """One stream chunk: text None opens a chat choice (its role); finish_reason closes a choice.

        logprobs: the entries of the tokens this chunk shows (None or empty: "logprobs": null);
        reasoning: a chat answer's reasoning, as `delta.reasoning_content` (vLLM's name); call: one tool call delta.
        """
        shaped_logprobs = self._logprobs(logprobs) if logprobs else None
        if self.chat:
            delta: dict[str, Any] = {}
            if text is None:
                delta = {"role": "assistant", "content": ""}
            elif call is not None:
                delta = {"tool_calls": [call]}
            elif reasoning:
                delta = {"reasoning_content": reasoning}
            elif text:
                delta = {"content": text}
            choice: dict[str, Any] = {"index": index, "delta": delta, "logprobs": shaped_logprobs,
                                      "finish_reason": finish_reason}
        else:
            choice = {"index": index, "text": text or "", "logprobs": shaped_logprobs, "finish_reason": finish_reason}
        chunk = {"id": self._id(), "object": "chat.completion.chunk" if self.chat else "text_completion",
                 "created": self.created, "model": self.model, "choices": [choice]}
        if usage:
            chunk["usage"] = None  # include_usage: every chunk says null until the last one
        return chunk

    def usage_chunk(self, choices: list[Choice]) -> dict[str, Any]:
        """The last chunk of a stream with include_usage: no choices, the usage."""
        return {"id": self._id(), "object": "chat.completion.chunk" if self.chat else "text_completion",
                "created": self.created, "model": self.model, "choices": [], "usage": self.usage(choices)}

    def _logprobs(self, entries: list[TokenLogprob] | None) -> dict[str, Any] | None:
        if entries is None:
            return None
        return chat_logprobs(entries) if self.chat else completion_logprobs(entries)

    def _id(self) -> str:
        return ("chatcmpl-" if self.chat else "cmpl-") + self.id


def _message(choice: Choice) -> dict[str, Any]:
    """A whole chat answer's message: reasoning_content only where the model reasoned (vLLM's field); tool_calls
    where it called (content null then, unless it also wrote text)."""
    message: dict[str, Any] = {"role": "assistant", "content": choice.content}
    if choice.reasoning:
        message["reasoning_content"] = choice.reasoning
    if choice.calls:
        message["tool_calls"] = [call.shaped() for call in choice.calls]
        message["content"] = choice.content if choice.content.strip() else None
    return message
