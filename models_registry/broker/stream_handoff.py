"""The view side of a streamed generation: charged, admitted and sent in one script, then its token events in order.

`open_streams` returns only once the first events (or an error) came back, so every
usual error is an ordinary JSON answer before the first byte; afterwards `events()`
yields the rest as they arrive: the worker's token events (core.token_events), which
each route shapes. Token messages carry a sequence number (the broker may deliver two of
one round trip in either order); the request's final result message may overtake the
last tokens: it says how many token messages went before it, and the stream waits for
every one (it ends on the sequence's last event).

A worker that dies mid-generation leaves its request leased: another worker takes it
again and generates it from its prompt (broker.message_leases), under its own name. A
whole answer then starts over unseen; a stream goes on once the new generation has
repeated every token its client already has (greedy and seeded rows repeat them), and
ends with a retry error where it says something else.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterable
from dataclasses import dataclass
from typing import Any

from models_registry.broker import admission, enqueue, handoff, messages
from models_registry.broker.work_layer import WorkLayer, work_layer
from models_registry.core import token_events
from models_registry.core.errors import Overloaded, Timeout, Unavailable, from_wire
from models_registry.observe import tracing
from models_registry.core.waits import next_item

LATE_TOKENS_S = 2.0  # after a result that does not count its token messages, how long tokens are awaited
EXTEND_EVERY_S = 1.0  # how often a live stream pushes its admission deadline forward


@dataclass(frozen=True)
class Opening:
    """One generation to stream: its prompt and the worker's parameters for it."""

    text: str
    parameters: dict[str, Any]


def _token(event: token_events.Event) -> tuple[Any, Any]:
    """What a repeated generation must say again: the event's token id and text (None, None: an end-only event)."""
    token = token_events.token_of(event)
    return (None, None) if token is None else (token["id"], token["text"])


class Stream:
    """One streamed request: its reply queue, and the events in order.

    whole: the events make one answer sent once they all came (not each as it comes).
    """

    def __init__(self, layer: WorkLayer, model: str, task: str, key: str, reply: str, timeout_s: float,
                 whole: bool = False) -> None:
        self.layer = layer
        self.whole = whole
        self.model, self.task, self.key, self.reply = model, task, key, reply
        self.timeout_s = timeout_s
        # Its reply channel's messages, read (broker.messages.read_reply): the layer fills it once the request is sent.
        self.queue: asyncio.Queue[messages.WorkResult | messages.TokenEvents] = asyncio.Queue()
        self.next_seq = 0
        self.waiting: dict[int, list[dict[str, Any]]] = {}
        self.result: messages.WorkResult | None = None
        self.finished = False
        self.first: list[dict[str, Any]] = []
        self.extended_at = time.time()
        self.closed = False
        self.source: str | None = None  # the worker generating it (its first token message says)
        self.spelled = ""  # the text of the events of the generation running, so far
        self.text: str | None = None  # the whole generated text, once its last event came (a shadow compares it)
        self.gone: set[str] = set()  # workers that died generating it: their late messages are dropped
        self.starts = 0  # how many times it started over on another worker
        self.sent: list[tuple[Any, Any]] = []  # the tokens handed out, that a new generation must repeat first
        self.repeated = 0  # how many of them the generation now running has repeated

    async def next_events(self) -> list[dict[str, Any]] | None:
        """The next events in order; None at the end. Raises the worker's error, or Timeout when it goes quiet."""
        quiet_until = time.time() + self.timeout_s
        late_until: float | None = None
        while True:
            if self.next_seq in self.waiting:
                events = self.waiting.pop(self.next_seq)
                self.next_seq += 1
                for event in events:
                    self.spelled = token_events.text_after(self.spelled, event)
                    if token_events.is_final(event):
                        self.finished, self.text = True, self.spelled
                return self._unseen(events)
            if self.result is not None and self.result.error_type:
                raise from_wire(self.result.error_type, self.result.error or "generation failed")
            if self.finished or (late_until is not None and time.time() >= late_until):
                return None
            if self.result is not None and self.result.token_messages is not None:
                if self.next_seq >= self.result.token_messages:
                    return None  # every token message the worker sent before its answer is in
            elif self.result is not None and late_until is None:  # a worker that does not count them
                late_until = time.time() + LATE_TOKENS_S
            until = late_until if late_until is not None else quiet_until
            try:
                reply = await next_item(self.queue, max(0.0, until - time.time()))
            except TimeoutError:
                if late_until is not None:
                    return None
                raise Timeout(f"no token within {self.timeout_s:g} s") from None
            self._keep_admitted()
            if isinstance(reply, messages.TokenEvents):
                if reply.source in self.gone:
                    continue  # sent before its worker died, delivered after another took over
                self.source = self.source or reply.source
                if reply.source != self.source:  # requeued after its worker died: it starts over
                    self._start_over(reply.source)
                self.waiting[reply.seq] = reply.events
            else:
                self.result = reply

    def _start_over(self, source: str) -> None:
        """Follow the generation another worker started from the prompt after this one's worker died."""
        assert self.source is not None
        self.gone.add(self.source)
        self.source, self.next_seq, self.waiting, self.finished, self.text = source, 0, {}, False, None
        self.spelled = ""
        self.starts += 1
        self.repeated = 0

    def _unseen(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """events less those a new generation repeats of what the client has; Unavailable where it differs."""
        if self.whole:
            return events  # nothing was handed out: events() keeps only the last generation's
        unseen = []
        for event in events:
            if self.repeated < len(self.sent):
                if _token(event) != self.sent[self.repeated] or token_events.is_final(event):
                    raise Unavailable("the worker generating this stream went away and its new generation "
                                      "differs from what was sent; send the request again",
                                      headers={"Retry-After": "1"})
                self.repeated += 1
                continue
            self.sent.append(_token(event))
            self.repeated += 1
            unseen.append(event)
        return unseen

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """Every event: the first ones, then the rest as they come (a whole answer's: all once they came)."""
        if self.whole:
            kept, starts = list(self.first), self.starts
            while (events := await self.next_events()) is not None:
                if self.starts != starts:  # what the dead worker generated is not the answer
                    kept, starts = [], self.starts
                kept.extend(events)
            for event in kept:
                yield event
            return
        for event in self.first:
            yield event
        while (events := await self.next_events()) is not None:
            for event in events:
                yield event

    def _keep_admitted(self) -> None:
        """Push the admission entry's deadline forward: the worker cancels a stream whose entry is gone."""
        now = time.time()
        if now - self.extended_at >= EXTEND_EVERY_S:
            self.extended_at = now
            handoff.in_background(_extend(self.layer, self.model, self.task, self.key, now + self.timeout_s))

    def close(self) -> None:
        """Stop listening and give the place back, in the background: the worker stops at its next token.

        Nothing waits for it (as for a unary request's places, broker.handoff): what the worker sends
        meanwhile lands in a queue nobody reads, and goes with it.
        """
        if self.closed:
            return
        self.closed = True
        task = asyncio.ensure_future(_release(self.layer, self.model, self.task, self.key, self.reply))
        _releasing.add(task)
        task.add_done_callback(_releasing.discard)


_releasing: set[asyncio.Task[None]] = set()  # closed streams giving their channel and place back


async def _release(layer: WorkLayer, model: str, task: str, key: str, reply: str) -> None:
    """A closed stream's reply channel forgotten and its place given back."""
    layer.forget_reply(reply)
    handoff.leave_later(layer, model, task, key, 1)


async def _extend(layer: WorkLayer, model: str, task: str, key: str, deadline: float) -> None:
    try:
        await asyncio.wait_for(admission.extend(layer, model, task, key, deadline), handoff.BROKER_TIMEOUT_S)
    except Exception:  # noqa: BLE001, S110 - the next event tries again
        pass


async def _start(layer: WorkLayer, opening: Opening, charge: enqueue.ChargePlan | None, *, model: str, task: str,
                 timeout_s: float, max_queue_size: int, drain_rate: float, priority: str, client: str,
                 whole: bool, adapter: str) -> Stream:
    """Charge, admit and send one prompt in one round trip (handoff.enqueue_request); its Stream, listening."""
    deadline = time.time() + timeout_s
    key = uuid.uuid4().hex
    reply = await layer.new_channel()
    stream = Stream(layer, model, task, key, reply, timeout_s, whole)
    traceparent, tracestate = tracing.wire_context() if tracing.tracer is not None else ("", "")
    message = messages.WorkRequest(
        id=key, reply=reply, model=model, task=task, inputs=[opening.text],
        parameters={**opening.parameters, "stream": True}, deadline=deadline, priority=priority, client=client,
        traceparent=traceparent, tracestate=tracestate, adapter=adapter,
    ).to_wire()
    channel = messages.model_channel(model)
    places = admission.places(layer, model, task, key, 1, deadline, max_queue_size)
    try:  # the layer listens on the reply channel before the request goes out
        await handoff.enqueue_request(layer, model, task, channel, message, places, drain_rate, priority, charge,
                                      (reply, stream.queue, messages.read_reply))
    except (Overloaded, enqueue.ChargeRefused):  # refused whole: it holds no place
        layer.forget_reply(reply)
        raise
    except BaseException:  # the broker may have taken it: its place goes back too
        stream.close()
        raise
    return stream


async def open_streams(openings: list[Opening], charge: enqueue.ChargePlan | None, *, model: str, task: str,
                       timeout_s: float, max_queue_size: int, drain_rate: float = 0.0, priority: str = "interactive",
                       client: str = "", whole: bool = False, adapter: str = "") -> list[Stream]:
    """One stream per opening, returned once each has its first events; all closed if any fails.

    whole: the streams make one answer, sent once they ended (a generation that starts over is not seen).
    adapter: the LoRA adapter of model that generates them ("": the base).

    The first is sent with the request's charge in its script (a refusal raises ChargeRefused
    before anything is queued); the others are sent once it was admitted, together.
    """
    layer = work_layer()
    streams: list[Stream | None] = [None] * len(openings)

    async def start(index: int, plan: enqueue.ChargePlan | None) -> None:
        streams[index] = await _start(layer, openings[index], plan, model=model, task=task, timeout_s=timeout_s,
                                      max_queue_size=max_queue_size, drain_rate=drain_rate, priority=priority,
                                      client=client, whole=whole, adapter=adapter)

    try:
        await start(0, charge)
        await _together(start(index, None) for index in range(1, len(openings)))
        await _together(_begin(stream) for stream in streams if stream is not None)
    except BaseException:
        for stream in streams:
            if stream is not None:
                stream.close()
        raise
    return [stream for stream in streams if stream is not None]


async def _together(steps: Iterable[Awaitable[None]]) -> None:
    """Run steps at once; raise the first failure once every one has ended."""
    results = await asyncio.gather(*steps, return_exceptions=True)
    failure = next((result for result in results if isinstance(result, BaseException)), None)
    if failure is not None:
        raise failure


async def _begin(stream: Stream) -> None:
    """Wait for the stream's first events (its errors raise here, before any byte is answered)."""
    first = await stream.next_events()
    if first is None:
        raise Unavailable("the worker answered without generating anything")
    stream.first = first
