"""Admission across every worker: a task's pending items live in one Redis sorted set.

A view adds its request's items (scored by deadline) in the script that sends it
(broker.enqueue) and removes them when it has its answer, gave up, or its client went
away. Over max_queue_size the request is refused at once, whole. A worker asks the same
set, just before compute, which of its requests still have a waiting client, and drops
the others.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from models_registry.broker.enqueue import QueuePlaces


@dataclass(frozen=True)
class Places:
    """A request's places in its task's admission set: the set's key and members(request_id, count)."""

    pending_key: str
    request_id: str
    count: int


def pending_key(layer: Any, model: str, task: str) -> str:
    """The sorted set of pending items of one model task."""
    return f"{layer.prefix}pending:{model}:{task}"


def places(layer: Any, model: str, task: str, request_id: str, count: int, deadline: float,
           limit: int) -> QueuePlaces:
    """A request's count places in its task's queue, to take in the enqueue script (broker.enqueue)."""
    return QueuePlaces(pending_key(layer, model, task), members(request_id, count), deadline, limit, time.time())


def members(request_id: str, count: int) -> list[str]:
    """One member per input of a request."""
    return [f"{request_id}:{i}" for i in range(count)]


async def leave(layer: Any, model: str, task: str, request_id: str, count: int) -> None:
    """Give the places back (answered, timed out or cancelled)."""
    await layer.connection(0).zrem(pending_key(layer, model, task), *members(request_id, count))


async def extend(layer: Any, model: str, task: str, request_id: str, deadline: float) -> None:
    """Move a one-input request's deadline (a live stream outlasts the task's timeout)."""
    await layer.connection(0).zadd(pending_key(layer, model, task), {members(request_id, 1)[0]: deadline}, xx=True)


async def still_wanted(layer: Any, model: str, task: str, request_ids: list[str]) -> set[str]:
    """Which of these requests still have a client waiting."""
    if not request_ids:
        return set()
    scores = await layer.connection(0).zmscore(pending_key(layer, model, task), [f"{r}:0" for r in request_ids])
    return {rid for rid, score in zip(request_ids, scores) if score is not None}


async def depth(layer: Any, model: str, task: str) -> int:
    """Pending items of a task right now."""
    conn = layer.connection(0)
    key = pending_key(layer, model, task)
    await conn.zremrangebyscore(key, "-inf", repr(time.time()))
    return int(await conn.zcard(key))
