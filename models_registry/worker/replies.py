"""Answers to the views' reply channels, and the release of the leases of answered messages."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from models_registry.broker import admission, messages
from models_registry.broker.work_layer import WorkLayer
from models_registry.core.batch_types import PendingRequest
from models_registry.core.errors import HostingError, Internal, Unavailable, public_message
from models_registry.worker import batch_spans
from models_registry.worker.delivery import Delivery, Lease

logger = logging.getLogger(__name__)

ERROR_REPLY_WINDOW_S = 10.0  # how long an error answer is retried when the request's deadline is unknown
RETRY_FIRST_S, RETRY_MAX_S = 0.1, 1.0


class Replies:
    """Sends every answer in a task of its own, so the batch loop never waits on Redis."""

    def __init__(self, layer: WorkLayer, worker_id: str) -> None:
        self.layer = layer
        self.worker_id = worker_id
        self._tasks: set[asyncio.Task[None]] = set()
        self._to_release: list[Lease] = []
        self._release_task: asyncio.Task[None] | None = None

    def pending(self) -> int:
        """Replies still being sent and leases still to release."""
        return len(self._tasks) + len(self._to_release)

    def batch(self, requests: list[PendingRequest[Delivery]], started: float, compute_s: float,
              token_messages: dict[str, int] | None = None, traced: Any = None) -> None:
        """Answer every request a batch finished (token_messages: what each streamed one was sent before;
        traced: worker.batch_spans.BatchTrace, the batch span's context once recorded: the parent of the reply's)."""
        self._spawn(self._reply_all(requests, started, compute_s, token_messages or {}, traced))

    def error(self, request_id: str, reply: str, error: HostingError, lease: Lease | None = None,
              deadline: float | None = None) -> None:
        """Answer one request with an error (and release its lease once sent)."""
        until = deadline if deadline is not None else time.time() + ERROR_REPLY_WINDOW_S
        self._spawn(self._send_error(request_id, reply, error, lease, until))

    def fail(self, requests: list[PendingRequest[Delivery]], why: str) -> None:
        """Answer queued requests that can no longer run (model unloaded, task removed) with 503."""
        for request in requests:
            request.done = True
            self.error(request.id, request.delivery.reply, Unavailable(why), request.delivery.lease, request.deadline)

    def release(self, lease: Lease | None) -> None:
        """Forget a leased message soon (answered or dropped); one round trip per burst."""
        if lease is None:
            return
        self._to_release.append(lease)
        if self._release_task is None or self._release_task.done():
            self._release_task = asyncio.ensure_future(self._flush_releases())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reply_all(self, requests: list[PendingRequest[Delivery]], started: float, compute_s: float,
                         token_messages: dict[str, int], traced: Any) -> None:
        """All of a batch's replies in one round trip."""
        replies = [(r.delivery.reply, self._result_message(r, started, compute_s, token_messages.get(r.id)))
                   for r in requests]
        deadline = max(r.deadline for r in requests)
        leases = [r.delivery.lease for r in requests if r.delivery.lease is not None]
        # Each request's admission places go with its answer: its view need not give them back.
        places = [admission.Places(admission.pending_key(self.layer, *r.key), r.id, r.n_items) for r in requests]

        async def send_all() -> None:
            sending = time.time()
            sent = await self.layer.send_replies(replies, self.worker_id, leases, places)
            if traced is not None:  # its batch's spans were recorded while this was sent (the batch loop's call_soon)
                batch_spans.record_reply(traced, len(replies), sending, time.time())
            if sent < len(replies):
                logger.warning("%d of %d replies did not fit their channels", len(replies) - sent, len(replies))

        if not await until_sent(send_all, deadline, f"{len(replies)} replies"):
            for lease in leases:
                self.release(lease)

    @staticmethod
    def _public(request_id: str, error: HostingError) -> str:
        """The error's message for the client; an internal one's text goes to this log only."""
        public = public_message(error, request_id)
        if public != error.message:
            logger.error("request %s answered 500: %s", request_id, error.message)
        return public

    def _result_message(self, request: PendingRequest[Delivery], started: float, compute_s: float,
                        token_messages: int | None = None) -> dict[str, Any]:
        queue_ms = max(0.0, ((request.started_at or started) - request.arrival) * 1000)
        batch_size = max(request.batch_sizes or [0])
        if request.error is not None:
            error = request.error if isinstance(request.error, HostingError) else Internal(str(request.error))
            return messages.WorkResult(
                request.id, error_type=error.error_type, error=self._public(request.id, error),
                queue_ms=queue_ms, compute_ms=compute_s * 1000, batch_size=batch_size, worker=self.worker_id,
            ).to_wire()
        return messages.WorkResult(
            request.id, outputs=request.outputs, queue_ms=queue_ms,
            compute_ms=compute_s * 1000, batch_size=batch_size, worker=self.worker_id,
            tokens=request.delivery.tokens, token_messages=token_messages,
        ).to_wire()

    async def _send_error(self, request_id: str, channel: str, error: HostingError, lease: Lease | None,
                          deadline: float) -> None:
        # Built in the answer's own task, as a batch's answers are (_reply_all): its caller's path (the pull
        # loop's turn) never enters broker.messages for it.
        message = messages.WorkResult(request_id, error_type=error.error_type, error=self._public(request_id, error),
                                      retry_after=error.headers.get("Retry-After")).to_wire()
        await self._send(channel, message, deadline)
        self.release(lease)

    async def _flush_releases(self) -> None:
        await asyncio.sleep(0)  # let the other replies of this batch join
        while self._to_release:
            leases, self._to_release = self._to_release, []
            by_channel: dict[str, list[bytes]] = {}
            for channel, member in leases:
                by_channel.setdefault(channel, []).append(member)
            for channel, members in by_channel.items():
                try:
                    await self.layer.release(channel, self.worker_id, members)
                except Exception:
                    logger.exception("could not release %d leases (they will be requeued)", len(members))

    async def _send(self, channel: str, message: dict[str, Any], deadline: float) -> None:
        await until_sent(lambda: self.layer.send(channel, message), deadline, f"a reply on {channel}")


async def until_sent(send: Callable[[], Awaitable[Any]], deadline: float, what: str) -> bool:
    """Call send until it succeeds or deadline passes (the broker may be restarting); whether it went.

    Nobody waits for an answer after its deadline, so giving up then loses nothing; a
    reply sent twice (the first went but its acknowledgement did not) is dropped by the view.
    """
    delay = RETRY_FIRST_S
    while True:
        try:
            await send()
            return True
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if time.time() + delay >= deadline:
                logger.error("gave up sending %s at its deadline: %s: %s", what, type(error).__name__, error)
                return False
            logger.warning("could not send %s (%s: %s); retrying in %.1fs", what, type(error).__name__, error, delay)
            await asyncio.sleep(delay)
            delay = min(RETRY_MAX_S, delay * 2)
