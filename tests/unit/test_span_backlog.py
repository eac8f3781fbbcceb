"""worker.span_backlog: span-recording calls run together, in their order, within a bound in time and number."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from models_registry.observe import tracing
from models_registry.worker import span_backlog
from models_registry.worker.span_backlog import SpanBacklog


def test_calls_wait_for_the_most_and_then_run_at_once_in_their_order() -> None:
    async def scenario() -> list[Any]:
        ran: list[Any] = []
        backlog = SpanBacklog(most=3, wait_s=60)
        backlog.add(ran.append, 1)
        backlog.add(ran.append, 2)
        waiting = list(ran)
        backlog.add(ran.append, 3)  # the third: all run now, not in a minute
        backlog.add(ran.append, 4)
        return [waiting, list(ran)]

    assert asyncio.run(scenario()) == [[], [1, 2, 3]]


def test_fewer_than_the_most_run_once_the_wait_is_over() -> None:
    async def scenario() -> list[Any]:
        ran: list[Any] = []
        backlog = SpanBacklog(most=100, wait_s=0.05)
        backlog.add(ran.append, "a")
        await asyncio.sleep(0.01)
        backlog.add(ran.append, "b")  # the wait counts from the first
        before = list(ran)
        await asyncio.sleep(0.1)
        after = list(ran)
        backlog.add(ran.append, "c")  # a new wait for the next
        await asyncio.sleep(0.1)
        return [before, after, list(ran)]

    assert asyncio.run(scenario()) == [[], ["a", "b"], ["a", "b", "c"]]


def test_a_call_that_raises_is_logged_and_the_others_run(caplog: pytest.LogCaptureFixture) -> None:
    ran: list[int] = []

    def broken(_: int) -> None:
        raise ValueError("no span")

    async def scenario() -> None:
        backlog = SpanBacklog(most=10, wait_s=60)
        backlog.add(ran.append, 1)
        backlog.add(broken, 2)
        backlog.add(ran.append, 3)
        backlog.flush()  # as the worker does at its shutdown: nothing left waiting
        backlog.flush()

    with caplog.at_level(logging.ERROR):
        asyncio.run(scenario())
    assert ran == [1, 3]
    assert sum("spans of a batch not recorded" in r.message for r in caplog.records) == 1


def test_a_reply_is_recorded_under_its_batch_span_once_the_batch_was(monkeypatch: pytest.MonkeyPatch) -> None:
    recorded: list[Any] = []
    monkeypatch.setattr(tracing, "record_batch", lambda *args: ("batch span", *args))
    monkeypatch.setattr(tracing, "record_reply", lambda context, *args: recorded.append((context, *args)))
    traced, untraced = tracing.BatchTrace(), tracing.BatchTrace()

    async def scenario() -> None:
        backlog = SpanBacklog(most=10, wait_s=60)
        backlog.add(span_backlog.record_batch, traced, ("tiny", "embed"), "size", 30, ("cpu", "torch"),
                    [("r1", b"ctx1", 0.5, 10), ("r2", b"ctx2", 0.6, 15), ("r1", b"ctx1", 0.5, 5)], 0.7, 1.0, 2.0)
        backlog.add(span_backlog.record_reply, traced, 3, 2.0, 2.5)
        backlog.add(span_backlog.record_reply, untraced, 1, 2.0, 2.5)  # its batch had no traced request
        assert recorded == []
        backlog.flush()

    asyncio.run(scenario())
    batch_span = ("batch span", [(b"ctx1", 0.5), (b"ctx2", 0.6)], 0.7, 1.0, 2.0, {  # r1's two items: one request
        "hosting.model": "tiny", "hosting.task": "embed", "hosting.batch.size": 3, "hosting.batch.requests": 2,
        "hosting.batch.reason": "size", "hosting.batch.tokens": 30, "hosting.batch.padded_tokens": 30,
        "hosting.device": "cpu", "hosting.backend": "torch"})
    assert traced.context == batch_span
    assert recorded == [(batch_span, 3, 2.0, 2.5)]
