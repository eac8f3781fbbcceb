"""A worker's batch and reply spans, recorded several batches at a time (observe.tracing.record_batch and reply)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from models_registry.observe import tracing

logger = logging.getLogger(__name__)

# Calls run together: MOST (a batch adds two, its spans and then its reply's: about 8 batches), or WAIT_S after the
# first at the latest (spans reach the exporter that much later).
MOST = 16
WAIT_S = 0.2


class SpanBacklog:
    """Span-recording calls, run in the order they came when MOST wait or WAIT_S after the first.

    Why: between two batches a loaded worker's forward evicts the CPU's caches, so the span code of each batch ran
    cold: 9 us a request for batches of 14, with a 64 MiB sweep between batches as the forward's, against 2 us in
    a hot loop (the in-situ cost, 8-10 us a request, measured by thread CPU time). Batches' spans recorded together
    pay for a cold start once (3.3 us a request with the sweep every 16 batches); in the loaded worker, about 8
    batches a flush, a batch's span code went from 138 to 88 us.
    """

    __slots__ = ("_calls", "_timer", "most", "wait_s")

    def __init__(self, most: int = MOST, wait_s: float = WAIT_S) -> None:
        self._calls: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self.most, self.wait_s = most, wait_s

    def add(self, call: Callable[..., None], *args: Any) -> None:
        """call(*args) after the calls before it: now when it makes MOST, else within WAIT_S (the running loop's)."""
        self._calls.append((call, args))
        if len(self._calls) >= self.most:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.wait_s, self.flush)

    def flush(self) -> None:
        """Every waiting call now, in order; one that raises is logged, and the rest still run."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        calls, self._calls = self._calls, []
        for call, args in calls:
            try:
                call(*args)
            except Exception:  # noqa: BLE001 - a span is never worth a batch or the worker
                logger.exception("spans of a batch not recorded")


backlog = SpanBacklog()  # this worker process' own: the batch loop adds a batch's spans, the replies its reply's


def record_batch(traced: tracing.BatchTrace, key: tuple[str, str], reason: str, padded: int, where: tuple[str, Any],
                 items: list[tuple[str, bytes, float, int]], formed: float, started: float, ended: float) -> None:
    """A batch's spans (observe.tracing.record_batch) from what was read of it: its key (model, task), why it was
    formed, its padded tokens, (device, backend) of the model, each item's (request id, wire context, arrival,
    tokens); traced.context their batch span's, the reply's parent."""
    requests = {request_id: (context, arrival) for request_id, context, arrival, _ in items}  # a request's items: one
    traced.context = tracing.record_batch(list(requests.values()), formed, started, ended, {
        "hosting.model": key[0], "hosting.task": key[1], "hosting.batch.size": len(items),
        "hosting.batch.requests": len(requests), "hosting.batch.reason": str(reason),
        "hosting.batch.tokens": sum([item[3] for item in items]), "hosting.batch.padded_tokens": padded,
        "hosting.device": where[0], "hosting.backend": str(where[1])})


def record_reply(traced: tracing.BatchTrace, replies: int, started: float, ended: float) -> None:
    """A batch's reply span, under its batch span (added after it: recorded after it); none when no request was."""
    if traced.context is not None:
        tracing.record_reply(traced.context, replies, started, ended)
