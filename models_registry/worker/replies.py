"""Answers to the views' reply channels, and the release of the leases of answered messages."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from models_registry.api.errors import HostingError, Internal, Unavailable
from models_registry.broker import messages
from models_registry.worker.batcher import PendingRequest

logger = logging.getLogger(__name__)

Lease = tuple[str, bytes]  # (channel, message as the layer holds it in this worker's in-flight set)


class Replies:
    """Sends every answer in a task of its own, so the batch loop never waits on Redis."""

    def __init__(self, layer: Any, worker_id: str) -> None:
        self.layer = layer
        self.worker_id = worker_id
        self._tasks: set[asyncio.Task[None]] = set()
        self._to_release: list[Lease] = []
        self._release_task: asyncio.Task[None] | None = None

    def pending(self) -> int:
        """Replies still being sent and leases still to release."""
        return len(self._tasks) + len(self._to_release)

    def batch(self, requests: list[PendingRequest], started: float, compute_s: float) -> None:
        """Answer every request a batch finished."""
        self._spawn(self._reply_all(requests, started, compute_s))

    def error(self, request_id: str, reply: str, error: HostingError, lease: Lease | None = None) -> None:
        """Answer one request with an error (and release its lease once sent)."""
        message = messages.result_message(request_id=request_id, error_type=error.error_type, error=error.message)
        if "Retry-After" in error.headers:
            message["retry_after"] = error.headers["Retry-After"]
        self._spawn(self._send_then_release(reply, message, lease))

    def fail(self, requests: list[PendingRequest], why: str) -> None:
        """Answer queued requests that can no longer run (model unloaded, task removed) with 503."""
        for request in requests:
            request.done = True
            self.error(request.id, request.context["reply"], Unavailable(why), request.context.get("lease"))

    def release(self, lease: Lease | None) -> None:
        """Forget a leased message soon (answered or dropped); one round trip per burst."""
        if lease is None or not hasattr(self.layer, "release"):
            return
        self._to_release.append(lease)
        if self._release_task is None or self._release_task.done():
            self._release_task = asyncio.ensure_future(self._flush_releases())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reply_all(self, requests: list[PendingRequest], started: float, compute_s: float) -> None:
        """One round trip when the layer can send many."""
        replies = [(r.context["reply"], self._result_message(r, started, compute_s)) for r in requests]
        if hasattr(self.layer, "send_replies"):
            try:
                sent = await self.layer.send_replies(replies)
                if sent < len(replies):
                    logger.warning("%d of %d replies did not fit their channels", len(replies) - sent, len(replies))
            except Exception:  # the views time out with 504; the worker must go on
                logger.exception("could not send %d replies", len(replies))
        else:
            for channel, message in replies:
                await self._send(channel, message)
        for request in requests:
            self.release(request.context.get("lease"))

    def _result_message(self, request: PendingRequest, started: float, compute_s: float) -> dict[str, Any]:
        queue_ms = max(0.0, ((request.started_at or started) - request.arrival) * 1000)
        batch_size = max(request.batch_sizes or [0])
        if request.error is not None:
            error = request.error if isinstance(request.error, HostingError) else Internal(str(request.error))
            return messages.result_message(
                request_id=request.id, error_type=error.error_type, error=error.message,
                queue_ms=queue_ms, compute_ms=compute_s * 1000, batch_size=batch_size, worker=self.worker_id,
            )
        return messages.result_message(
            request_id=request.id, outputs=request.outputs, queue_ms=queue_ms,
            compute_ms=compute_s * 1000, batch_size=batch_size, worker=self.worker_id,
            tokens=request.context.get("tokens", 0),
        )

    async def _send_then_release(self, channel: str, message: dict[str, Any], lease: Lease | None) -> None:
        await self._send(channel, message)
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

    async def _send(self, channel: str, message: dict[str, Any]) -> None:
        try:
            await self.layer.send(channel, message)
        except Exception:  # the view times out with 504; the worker must go on
            logger.exception("could not send the reply for %s", message.get("id"))
