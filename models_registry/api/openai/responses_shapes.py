"""OpenAI's Response object and its typed stream events, built from a chat choice's pieces (pure).

One ResponseEvents per answer: it is fed what the chat choice releases (reasoning, content text,
whole tool calls) and returns the events that tell it, each with its `type` and
`sequence_number`; the output items it closed make the final Response, streamed or not.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from models_registry.api.openai.tool_calls import ToolCall


def new_id(prefix: str) -> str:
    """A fresh id in OpenAI's style (`resp_…`, `msg_…`, `rs_…`, `fc_…`)."""
    return f"{prefix}_{os.urandom(12).hex()}"


@dataclass
class ResponseEvents:
    """The items and events of one Response as its pieces come."""

    model: str
    echo: dict[str, Any]  # the request fields the object repeats (api.openai.responses_requests.echo)
    id: str = field(default_factory=lambda: new_id("resp"))
    created_at: int = field(default_factory=lambda: int(time.time()))
    output: list[dict[str, Any]] = field(default_factory=list)  # the items opened so far, in order
    sequence: int = 0
    open_kind: str | None = None  # "reasoning" or "message": the item whose text is still growing

    def started(self) -> list[dict[str, Any]]:
        """response.created and response.in_progress."""
        shown = self.response("in_progress", None)
        return [self._event("response.created", response=shown), self._event("response.in_progress", response=shown)]

    def reasoning(self, text: str) -> list[dict[str, Any]]:
        """Reasoning text: opens a reasoning item, then one delta."""
        if not text:
            return []
        events = self._open("reasoning")
        item = self.output[-1]
        item["content"][0]["text"] += text
        return events + [self._event("response.reasoning_text.delta", item_id=item["id"], output_index=self._index,
                                     content_index=0, delta=text)]

    def text(self, text: str) -> list[dict[str, Any]]:
        """Answer text: opens a message item with an output_text part, then one delta."""
        if not text:
            return []
        events = self._open("message")
        item = self.output[-1]
        item["content"][0]["text"] += text
        return events + [self._event("response.output_text.delta", item_id=item["id"], output_index=self._index,
                                     content_index=0, delta=text, logprobs=[])]

    def call(self, call: ToolCall) -> list[dict[str, Any]]:
        """One whole tool call: its function_call item opened, its arguments, and the item done."""
        events = self._close()
        item = {"type": "function_call", "id": new_id("fc"), "call_id": call.id, "name": call.name,
                "arguments": "", "status": "in_progress"}
        self.output.append(item)
        index = self._index
        events.append(self._event("response.output_item.added", output_index=index, item=dict(item)))
        if call.arguments:
            events.append(self._event("response.function_call_arguments.delta", item_id=item["id"],
                                      output_index=index, delta=call.arguments))
        item["arguments"] = call.arguments
        item["status"] = "completed"
        events.append(self._event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                                  arguments=call.arguments))
        events.append(self._event("response.output_item.done", output_index=index, item=dict(item)))
        return events

    def finished(self, input_tokens: int, output_tokens: int, reasoning_tokens: int,
                 truncated: bool) -> list[dict[str, Any]]:
        """The open item closed, then response.completed (or response.incomplete at max_output_tokens)."""
        events = self._close()
        if not self.output:  # an empty answer is still one message
            events += self._open("message") + self._close()
        status = "incomplete" if truncated else "completed"
        usage = {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                 "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
                 "total_tokens": input_tokens + output_tokens}
        final = self.response(status, usage)
        events.append(self._event(f"response.{status}", response=final))
        return events

    def response(self, status: str, usage: dict[str, Any] | None) -> dict[str, Any]:
        """The Response object as it stands."""
        done = status != "in_progress"
        return {"id": self.id, "object": "response", "created_at": self.created_at, "status": status,
                "model": self.model, "output": [_item_copy(i) for i in self.output] if done else [],
                "usage": usage, "error": None,
                "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
                **self.echo}

    @property
    def _index(self) -> int:
        return len(self.output) - 1

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def _open(self, kind: str) -> list[dict[str, Any]]:
        if self.open_kind == kind:
            return []
        events = self._close()
        part_type = "reasoning_text" if kind == "reasoning" else "output_text"
        part: dict[str, Any] = {"type": part_type, "text": ""}
        if kind == "message":
            part["annotations"] = []
            item: dict[str, Any] = {"type": "message", "id": new_id("msg"), "role": "assistant",
                                    "status": "in_progress", "content": [part]}
        else:
            item = {"type": "reasoning", "id": new_id("rs"), "summary": [], "content": [part],
                    "status": "in_progress"}
        self.output.append(item)
        self.open_kind = kind
        index = self._index
        return events + [
            self._event("response.output_item.added", output_index=index, item={**item, "content": []}),
            self._event("response.content_part.added", item_id=item["id"], output_index=index, content_index=0,
                        part=dict(part, text="")),
        ]

    def _close(self) -> list[dict[str, Any]]:
        if self.open_kind is None:
            return []
        kind, self.open_kind = self.open_kind, None
        item, index = self.output[-1], self._index
        item["status"] = "completed"
        part = item["content"][0]
        text_done = "response.reasoning_text.done" if kind == "reasoning" else "response.output_text.done"
        extra = {} if kind == "reasoning" else {"logprobs": []}
        return [self._event(text_done, item_id=item["id"], output_index=index, content_index=0, text=part["text"],
                            **extra),
                self._event("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                            part=dict(part)),
                self._event("response.output_item.done", output_index=index, item=_item_copy(item))]


def _item_copy(item: dict[str, Any]) -> dict[str, Any]:
    copied = dict(item)
    if "content" in copied:
        copied["content"] = [dict(part) for part in copied["content"]]
    return copied


def deleted(response_id: str) -> dict[str, Any]:
    """DELETE /v1/responses/{id}'s answer."""
    return {"id": response_id, "object": "response", "deleted": True}
