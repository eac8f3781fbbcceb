"""The wire messages between the web processes and the workers: the only module that knows their keys.

Each message is a frozen dataclass with `to_wire()` (a msgpack-safe dict: str keys, and
str/int/float/bool/None/bytes/list/dict values, since channels_redis' msgpack cannot decode
int-keyed maps and refuses numpy values, sets or datetimes) and `from_wire()` (None, or a
default, for what a peer of another version may leave out). Two marks are read back here
too: `redelivered` (a leased pull found the message in flight at a worker death: it says so
beside the message, and a worker that sends the request back to its channel writes it in)
and `left` (the worker gave the request's admission places back in the script that sent
its answer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

INFERENCE_CHANNEL = "inference"
REQUEST_TYPE = "inference.request"
RESULT_TYPE = "inference.result"
TOKENS_TYPE = "inference.tokens"
INTERACTIVE, BATCH = "interactive", "batch"
_REDELIVERED = "redelivered"
PLACES_LEFT = "left"  # a reply says its request's admission places were given back with it (the layer's send)


def model_channel(model: str) -> str:
    """The work channel of one model: workers pull only the models they have ready."""
    return f"{INFERENCE_CHANNEL}.{model}"


@dataclass(frozen=True)
class WorkRequest:
    """A request for a model's task, from a view (or a batch-job line) to the workers."""

    id: str  # the server's key for the request (admission, reply, lease), not the client's X-Request-Id
    reply: str  # the channel its answer goes to
    model: str  # the wire name: a model, or one of its versions (catalog.rollout)
    task: str
    inputs: list[Any]
    parameters: dict[str, Any]
    deadline: float  # epoch seconds: dropped unanswered-for after it
    priority: str = INTERACTIVE  # or BATCH: served behind interactive items, shed first
    client: str = ""  # the API token that sent it (decode batches share rows fairly among clients)
    redelivered: bool = False  # in flight at a worker death: to be computed alone (worker.suspects)
    traceparent: str = ""  # the web's request span as W3C trace context, when tracing (observe.tracing.wire_context)
    tracestate: str = ""
    adapter: str = ""  # the LoRA adapter of model that computes it ("": the base model itself)

    def to_wire(self) -> dict[str, Any]:
        """The message as the channel layer carries it."""
        message: dict[str, Any] = {
            "type": REQUEST_TYPE, "id": self.id, "reply": self.reply, "model": self.model, "task": self.task,
            "inputs": self.inputs, "parameters": self.parameters, "deadline": self.deadline,
            "priority": self.priority,
        }
        if self.client:
            message["client"] = self.client
        if self.redelivered:
            message[_REDELIVERED] = True
        if self.traceparent:
            message["traceparent"] = self.traceparent
            if self.tracestate:
                message["tracestate"] = self.tracestate
        if self.adapter:
            message["adapter"] = self.adapter
        return message

    @classmethod
    def from_wire(cls, message: dict[str, Any], redelivered: bool = False) -> WorkRequest | None:
        """The request in a message; None where the message is malformed (no one to answer).

        redelivered: the leased pull found it in flight at a worker death (a Pulled's flag, broker.work_layer).
        """
        try:
            return cls(
                id=str(message["id"]), reply=str(message["reply"]), model=str(message["model"]),
                task=str(message["task"]), inputs=list(message["inputs"]),
                parameters=dict(message.get("parameters") or {}), deadline=float(message["deadline"]),
                priority=str(message.get("priority") or INTERACTIVE), client=str(message.get("client") or ""),
                redelivered=redelivered or bool(message.get(_REDELIVERED)),
                traceparent=_text(message.get("traceparent")), tracestate=_text(message.get("tracestate")),
                adapter=str(message.get("adapter") or ""),
            )
        except (KeyError, TypeError, ValueError):
            return None


def _text(value: Any) -> str:
    """A trace context field as the worker takes it: a string, else "" (the request is served untraced)."""
    return value if type(value) is str else ""


def is_batch_priority(message: dict[str, Any]) -> bool:
    """Whether a request message (as the layer holds it) is of batch priority."""
    return message.get("priority") == BATCH


@dataclass(frozen=True)
class WorkResult:
    """A worker's answer to one request: its outputs, or the error a view answers with."""

    id: str
    outputs: list[Any] | None = None
    error_type: str | None = None  # core.errors' slug; None: served
    error: str | None = None  # the message a client may see
    queue_ms: float = 0.0
    compute_ms: float = 0.0
    batch_size: int = 0
    worker: str = ""
    tokens: int = 0  # input tokens (after truncation), for usage reports
    retry_after: str | None = None  # the error's Retry-After, where it has one
    left: bool = False  # the worker gave the request's admission places back with this answer
    token_messages: int | None = None  # a stream's: the token messages sent before it (its view awaits them all)

    def to_wire(self) -> dict[str, Any]:
        """The message as the channel layer carries it."""
        message: dict[str, Any] = {
            "type": RESULT_TYPE, "id": self.id, "outputs": self.outputs, "error_type": self.error_type,
            "error": self.error, "queue_ms": round(self.queue_ms, 3), "compute_ms": round(self.compute_ms, 3),
            "batch_size": self.batch_size, "worker": self.worker, "tokens": self.tokens,
        }
        if self.retry_after is not None:
            message["retry_after"] = self.retry_after
        if self.left:
            message[PLACES_LEFT] = 1
        if self.token_messages is not None:
            message["token_messages"] = self.token_messages
        return message

    @classmethod
    def from_wire(cls, message: dict[str, Any]) -> WorkResult:
        """The result in a reply message (missing fields take their defaults)."""
        retry = message.get("retry_after")
        return cls(
            id=str(message.get("id") or ""), outputs=message.get("outputs"),
            error_type=message.get("error_type") or None, error=message.get("error"),
            queue_ms=float(message.get("queue_ms") or 0.0), compute_ms=float(message.get("compute_ms") or 0.0),
            batch_size=int(message.get("batch_size") or 0), worker=str(message.get("worker") or ""),
            tokens=int(message.get("tokens") or 0), retry_after=str(retry) if retry else None,
            left=bool(message.get(PLACES_LEFT)),
            token_messages=int(message["token_messages"]) if message.get("token_messages") is not None else None,
        )


@dataclass(frozen=True)
class TokenEvents:
    """Streamed generation events a worker sends as they are produced (seq orders them: 0, 1, ...).

    source names the generating worker: a request requeued after its worker died starts over
    elsewhere, and its view must not splice two generations together.
    """

    id: str
    seq: int
    events: list[dict[str, Any]] = field(default_factory=list)
    source: str = ""

    def to_wire(self) -> dict[str, Any]:
        """The message as the channel layer carries it."""
        return {"type": TOKENS_TYPE, "id": self.id, "seq": self.seq, "events": self.events, "source": self.source}

    @classmethod
    def from_wire(cls, message: dict[str, Any]) -> TokenEvents:
        """The events in a tokens message."""
        return cls(id=str(message.get("id") or ""), seq=int(message.get("seq", 0)),
                   events=list(message.get("events") or []), source=str(message.get("source") or ""))


def read_reply(message: dict[str, Any]) -> WorkResult | TokenEvents:
    """What a reply channel brought: streamed events, or the request's result."""
    if message.get("type") == TOKENS_TYPE:
        return TokenEvents.from_wire(message)
    return WorkResult.from_wire(message)
