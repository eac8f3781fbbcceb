"""Streamed generation on the worker: tokens go to their views as the compute thread produces them.

The compute thread hands each event to the request's sink; the event loop gathers what
arrived since its last turn into one message per request (numbered, so the view can
order them) and sends them in one round trip. While streams are open it also asks the
broker, at most every CHECK_EVERY_S, which clients are still there: a sink whose client
left is cancelled, and generation stops for it at the next token.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from typing import Any

from models_registry.broker import admission, messages
from models_registry.broker.work_layer import WorkLayer
from models_registry.core.batch_types import Batch
from models_registry.worker.delivery import Delivery
from models_registry.core.waits import next_item

logger = logging.getLogger(__name__)

CHECK_EVERY_S = 0.05  # a Redis lookup per 50 ms per worker while streams are open


class StreamSink:
    """Where one streamed request's events go (put from the compute thread)."""

    def __init__(self, streams: TokenStreams, request_id: str, reply: str, model: str, task: str,
                 quiet: bool = False) -> None:
        self.streams = streams
        self.request_id = request_id
        self.reply = reply
        self.model = model
        self.task = task
        self.quiet = quiet  # a request answered whole: no events go out, but it stops when its client leaves
        self.seq = 0
        self.holders = 0  # the open items of its request
        self._cancelled = threading.Event()

    def put(self, event: dict[str, Any]) -> None:
        """One event for the client (thread-safe)."""
        if not self.quiet:
            self.streams.push(self, event)

    def cancelled(self) -> bool:
        """True once the client has gone."""
        return self._cancelled.is_set()

    def cancel(self) -> None:
        """Stop generating for this request (its client left)."""
        self._cancelled.set()


class TokenStreams:
    """The open streams of one worker and the task that sends their tokens."""

    def __init__(self, layer: WorkLayer) -> None:
        self.layer = layer
        self._lock = threading.Lock()
        self._pending: list[tuple[StreamSink, dict[str, Any]]] = []
        self._scheduled = False
        self._open: dict[str, StreamSink] = {}
        self._outbox: asyncio.Queue[list[tuple[str, dict[str, Any]]]] | None = None
        self._sender: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._checked_at = 0.0
        self.source = uuid.uuid4().hex[:12]  # this worker, in every token message

    def open(self, batch: Batch[Delivery], every: bool = False) -> list[StreamSink | None]:
        """A sink for each item of batch that streams (None for the others, or a quiet one with every).

        Call on the event loop. A quiet sink sends nothing; its client is checked as a stream's is.
        """
        self._loop = asyncio.get_running_loop()
        model, task = batch.key
        sinks: list[StreamSink | None] = []
        for item in batch.items:
            request = item.request
            if request.delivery.streams or every:
                sink = self._open.get(request.id)  # a request's items share one (its client is one)
                if sink is None:
                    sink = self._open[request.id] = StreamSink(self, request.id, request.delivery.reply, model, task,
                                                               quiet=not request.delivery.streams)
                sink.holders += 1
                sinks.append(sink)
            else:
                sinks.append(None)
        if any(sinks):
            self._sending()
        return sinks

    def close(self, sinks: list[StreamSink | None]) -> dict[str, int]:
        """The batch is done: its events go out now, its streams need no more client checks.

        Returns how many token messages each request was sent: its answer carries the count,
        and its view waits for them all (the broker may deliver the answer first).
        """
        if any(sink is not None for sink in sinks) and self._pending:
            self._flush()
        sent: dict[str, int] = {}
        for sink in sinks:
            if sink is not None:
                sink.holders -= 1
                if sink.holders <= 0:
                    self._open.pop(sink.request_id, None)
                if not sink.quiet:
                    sent[sink.request_id] = sink.seq
        return sent

    def push(self, sink: StreamSink, event: dict[str, Any]) -> None:
        """Queue an event from the compute thread; the event loop sends it on its next turn."""
        with self._lock:
            self._pending.append((sink, event))
            if self._scheduled or self._loop is None:
                return
            self._scheduled = True
        self._loop.call_soon_threadsafe(self._flush)

    def _flush(self) -> None:
        with self._lock:
            pending, self._pending, self._scheduled = self._pending, [], False
        if not pending:  # flushed already (a stream closed)
            return
        by_sink: dict[StreamSink, list[dict[str, Any]]] = {}
        for sink, event in pending:
            by_sink.setdefault(sink, []).append(event)
        replies = []
        for sink, events in by_sink.items():
            replies.append((sink.reply, messages.TokenEvents(sink.request_id, sink.seq, events, self.source).to_wire()))
            sink.seq += 1
        self._sending().put_nowait(replies)

    def _sending(self) -> asyncio.Queue[list[tuple[str, dict[str, Any]]]]:
        """The sender's queue, its task running."""
        if self._outbox is None:
            self._outbox = asyncio.Queue()
        if self._sender is None or self._sender.done():
            self._sender = asyncio.ensure_future(self._send_forever())
        return self._outbox

    async def _send_forever(self) -> None:
        """Send token messages in order, one round trip per turn, and notice clients that left."""
        assert self._outbox is not None
        while True:
            try:  # quiet sinks send nothing: their clients are checked all the same
                replies = await next_item(self._outbox, CHECK_EVERY_S if self._open else None)
            except TimeoutError:
                replies = []
            while not self._outbox.empty():  # what queued while the last round trip was out goes in this one
                replies.extend(self._outbox.get_nowait())
            try:
                if replies:
                    await self.layer.send_replies(replies)
            except Exception:  # the view times out or ends its stream; the worker must go on
                logger.exception("could not send %d token message(s)", len(replies))
            if self._open and time.monotonic() - self._checked_at >= CHECK_EVERY_S:
                self._checked_at = time.monotonic()
                await self._cancel_abandoned()

    async def _cancel_abandoned(self) -> None:
        by_task: dict[tuple[str, str], list[StreamSink]] = {}
        for sink in list(self._open.values()):
            if not sink.cancelled():  # a gone client is told once: its row ends at its next step
                by_task.setdefault((sink.model, sink.task), []).append(sink)
        for (model, task), sinks in by_task.items():
            try:
                wanted = await admission.still_wanted(self.layer, model, task, [s.request_id for s in sinks])
            except Exception:  # noqa: BLE001, S112 - broker trouble: keep generating rather than cut clients off
                continue
            for sink in sinks:
                if sink.request_id not in wanted:
                    logger.info("stream %s: client gone, generation stops at the next token", sink.request_id)
                    sink.cancel()
