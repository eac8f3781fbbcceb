"""Pure batch formation: per (model, task) queues, deadlines, splitting and reassembly.

No asyncio, no Channels, no torch: the caller passes the time in, so every decision is
unit-tested with plain numbers. The engine (worker side) owns one Batcher and calls:
`submit` when a request arrives, `drop_expired` and `next_batch` when it may start
work, `next_wakeup` to know how long it may sleep, and `complete` with a batch's results.
Interactive items go first and run in batches of their own; a batch-priority item
counts as interactive once it has waited aging_s, so none waits forever. While
interactive traffic is about, batch-only batches are kept small (a quarter of
max_batch_size): a computing batch cannot be interrupted, and an interactive request
arriving behind a small one waits less. Without interactive traffic they are full size.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic

from models_registry.core.batch_types import (
    Batch,
    BatchPolicy,
    D,
    Item,
    ItemFailure,
    Key,
    PendingRequest,
    QueueFull,
    UnknownKey,
)

BATCH = "batch"  # the priority class served behind the others (see policy.priority)
BULK_SHARE = 4  # batch-only batches hold max_batch_size // BULK_SHARE items while interactive traffic is about
# (key, items, longest input's tokens) -> whether such a batch fits in memory (capacity.batch_memory)
MemoryLimit = Callable[[Key, int, int], bool]


class Batcher(Generic[D]):
    """Per-key FIFO queues closed into batches by size, token budget, delay or idleness.

    D: what each request carries for the caller (opaque here; the worker's Delivery).
    """

    def __init__(self, idle_quiet_s: float = 0.0005, aging_s: float = 5.0, recent_s: float = 1.0,
                 memory_limit: MemoryLimit | None = None) -> None:
        # An idle device starts at once when nothing arrived for this long: messages of a
        # burst reach the worker one Redis round trip apart, and should share a batch.
        self.idle_quiet_s = idle_quiet_s
        self.aging_s = aging_s
        self.recent_s = recent_s  # interactive traffic "is about" this long after its last arrival
        # Asked before a batch grows: a batch of one always runs (only its own failure can say it does not fit).
        self.memory_limit = memory_limit
        self._last_interactive: dict[Key, float] = {}
        self._policies: dict[Key, BatchPolicy] = {}
        self._queues: dict[Key, list[Item[D]]] = {}
        self._last_arrival: dict[Key, float] = {}
        self._seq = itertools.count()

    # --- configuration -----------------------------------------------------------------
    def set_policy(self, key: Key, policy: BatchPolicy) -> None:
        """Serve key with these settings (takes effect for the next batch)."""
        self._policies[key] = policy
        self._queues.setdefault(key, [])

    def remove(self, key: Key) -> list[PendingRequest[D]]:
        """Stop serving key; returns the unfinished requests that were queued on it."""
        self._policies.pop(key, None)
        self._last_arrival.pop(key, None)
        self._last_interactive.pop(key, None)
        items = self._queues.pop(key, [])
        return _unique_requests(i.request for i in items if not i.request.done)

    def keys(self) -> list[Key]:
        """Keys currently served."""
        return list(self._policies)

    def policy(self, key: Key) -> BatchPolicy:
        """The policy of key (UnknownKey if not served)."""
        try:
            return self._policies[key]
        except KeyError:
            raise UnknownKey(key) from None

    def depth(self, key: Key) -> int:
        """Items waiting (not yet in a batch) for key."""
        return len(self._queues.get(key, ()))

    def depths(self) -> dict[Key, int]:
        """Items waiting per key."""
        return {k: len(q) for k, q in self._queues.items()}

    # --- intake ------------------------------------------------------------------------
    def submit(
        self,
        key: Key,
        request_id: str,
        payloads: Sequence[Any],
        costs: Sequence[int],
        now: float,
        deadline: float,
        delivery: D,
        priority: str = "interactive",
    ) -> PendingRequest[D]:
        """Queue a request's inputs; raises UnknownKey or QueueFull (nothing queued then)."""
        policy = self.policy(key)
        if len(payloads) != len(costs) or not payloads:
            raise ValueError("a request needs at least one input and one cost per input")
        queue = self._queues[key]
        if len(queue) + len(payloads) > policy.max_queue_size:
            raise QueueFull(key, len(queue), policy.max_queue_size)
        request = PendingRequest(
            id=request_id, key=key, n_items=len(payloads), arrival=now, deadline=deadline,
            delivery=delivery, outputs=[None] * len(payloads), remaining=len(payloads), priority=priority,
        )
        for index, (payload, cost) in enumerate(zip(payloads, costs)):
            queue.append(Item(request, index, payload, max(1, int(cost)), now, next(self._seq)))
        self._last_arrival[key] = now
        if priority != BATCH:
            self._last_interactive[key] = now
        return request

    # --- scheduling --------------------------------------------------------------------
    def drop_expired(self, now: float) -> list[PendingRequest[D]]:
        """Remove queued items of requests past their deadline (or already failed)."""
        expired: list[PendingRequest[D]] = []
        for key, queue in self._queues.items():
            keep: list[Item[D]] = []
            for item in queue:
                request = item.request
                if request.done:
                    continue
                if request.deadline <= now:
                    request.done = True
                    request.error = TimeoutError("deadline passed before compute")
                    expired.append(request)
                    continue
                keep.append(item)
            self._queues[key] = keep
        return expired

    def due_reason(self, key: Key, now: float, idle: bool) -> str | None:
        """Why key's queue should close a batch now, or None if it should keep waiting."""
        queue = self._queues.get(key)
        if not queue:
            return None
        policy = self._policies[key]
        if len(queue) >= policy.max_batch_size:
            return "size"
        if policy.max_batch_tokens and _padded(queue) >= policy.max_batch_tokens:
            return "tokens"
        if self.memory_limit is not None and len(queue) > 1 and not self._within(key, policy, queue):
            return "memory"
        if now >= queue[0].arrival + policy.max_batch_delay_s:
            return "delay"  # one deadline from the FIRST item, never reset by later ones
        if idle and now >= self._last_arrival.get(key, 0.0) + self.idle_quiet_s:
            return "idle"
        return None

    def next_batch(self, now: float, idle: bool = True) -> Batch[D] | None:
        """Close and return the most overdue batch, or None if none is due yet.

        Among due keys one with interactive (or aged) items goes first, then the one whose
        oldest such item waited longest, so several models on one worker are served in
        arrival order and none starves.
        """
        due = [(self._rank(q, now), k) for k, q in self._queues.items() if q and self.due_reason(k, now, idle)]
        if not due:
            return None
        _, key = min(due, key=lambda pair: pair[0])
        reason = self.due_reason(key, now, idle) or "idle"
        items = self._take(key, now)
        # Sorted by length: the runner pads each forward pass to its longest input.
        items.sort(key=lambda i: (i.cost, i.seq))
        return self._closed(key, items, reason, now)

    def hand_over(self, key: Key, now: float, keep: Callable[[Item[D]], bool]) -> Batch[D] | None:
        """Every waiting item of key that keep takes, at once and in arrival order, whatever the batch policy.

        For a queue another scheduler orders (the decode batch's: worker.generation_loop), so that a
        request waits in one queue under one aging rule; the items are still answered through complete().
        """
        queue = self._queues.get(key)
        items = [i for i in queue or () if keep(i)]
        if not items:
            return None
        taken = {id(i) for i in items}
        self._queues[key] = [i for i in queue if id(i) not in taken]  # type: ignore[union-attr]
        return self._closed(key, items, "handover", now)

    def _closed(self, key: Key, items: list[Item[D]], reason: str, now: float) -> Batch[D]:
        """items leave the queue as one batch: their start time and batch size recorded."""
        for item in items:
            if item.request.started_at is None:
                item.request.started_at = now
        sizes = len(items)
        for request in _unique_requests(i.request for i in items):
            request.batch_sizes.append(sizes)
        return Batch(key, items, reason)

    def next_wakeup(self, now: float) -> float | None:
        """The earliest time a waiting queue becomes due by delay or quiet time, if any."""
        times: list[float] = []
        for key, queue in self._queues.items():
            if queue:
                policy = self._policies[key]
                times.append(queue[0].arrival + policy.max_batch_delay_s)
                times.append(self._last_arrival.get(key, now) + self.idle_quiet_s)
                times.append(min(i.request.deadline for i in queue))
        return min(times) if times else None

    def urgent(self, item: Item[D], now: float) -> bool:
        """Interactive, or a batch-priority item that has waited aging_s."""
        return item.request.priority != BATCH or now - item.arrival >= self.aging_s

    def _rank(self, queue: list[Item[D]], now: float) -> tuple[int, int]:
        """(0, oldest urgent item's seq) when the queue holds urgent items, else (1, oldest seq)."""
        first = next((i for i in queue if self.urgent(i, now)), None)
        return (0, first.seq) if first is not None else (1, queue[0].seq)

    def _take(self, key: Key, now: float) -> list[Item[D]]:
        """Pick the next batch: urgent items alone when there are any, else batch items.

        Within the class, the oldest item plus those closest to it in length: small
        padding, and the oldest always goes, so every item eventually runs.
        """
        queue = self._queues[key]
        policy = self._policies[key]
        pool = [i for i in queue if self.urgent(i, now)]
        size = policy.max_batch_size
        if not pool:
            pool = queue
            if now - self._last_interactive.get(key, float("-inf")) < self.recent_s:
                size = max(1, size // BULK_SHARE)
        if len(pool) <= size and self._within(key, policy, pool):
            chosen = list(pool)
        else:
            oldest = pool[0]
            others = sorted(pool[1:], key=lambda i: (abs(i.cost - oldest.cost), i.seq))
            chosen = [oldest]
            longest = oldest.cost
            for item in others:
                if len(chosen) >= size:
                    break
                new_longest = max(longest, item.cost)
                if policy.max_batch_tokens and new_longest * (len(chosen) + 1) > policy.max_batch_tokens:
                    continue
                if self.memory_limit is not None and not self.memory_limit(key, len(chosen) + 1, new_longest):
                    continue
                chosen.append(item)
                longest = new_longest
        taken = {id(i) for i in chosen}
        self._queues[key] = [i for i in queue if id(i) not in taken]
        return chosen

    def _within(self, key: Key, policy: BatchPolicy, items: Sequence[Item[D]]) -> bool:
        """Whether items fit one batch: the token budget and the memory limit."""
        if policy.max_batch_tokens and _padded(items) > policy.max_batch_tokens:
            return False
        if self.memory_limit is None or len(items) <= 1:
            return True
        return self.memory_limit(key, len(items), max(i.cost for i in items))

    # --- results -----------------------------------------------------------------------
    def complete(self, batch: Batch[D], outputs: Sequence[Any]) -> list[PendingRequest[D]]:
        """Record a batch's outputs (one per item, ItemFailure for a failed one).

        Returns the requests that just finished: all their items are in, or one failed
        (a request gets exactly one answer, so its queued items are dropped then).
        """
        if len(outputs) != len(batch.items):
            raise ValueError(f"expected {len(batch.items)} outputs, got {len(outputs)}")
        finished: list[PendingRequest[D]] = []
        for item, output in zip(batch.items, outputs):
            request = item.request
            if request.done:
                continue  # already failed or expired: nobody waits for this slot
            if isinstance(output, ItemFailure):
                request.error = output.error
                request.done = True
                finished.append(request)
                continue
            request.outputs[item.index] = output
            request.remaining -= 1
            if request.remaining == 0:
                request.done = True
                finished.append(request)
        if any(r.error is not None for r in finished):
            self._purge_done(batch.key)
        return finished

    def _purge_done(self, key: Key) -> None:
        if key in self._queues:
            self._queues[key] = [i for i in self._queues[key] if not i.request.done]


def _padded(queue: Sequence[Item[D]]) -> int:
    return max(i.cost for i in queue) * len(queue)


def _unique_requests(requests: Iterable[PendingRequest[D]]) -> list[PendingRequest[D]]:
    seen: dict[int, PendingRequest[D]] = {}
    for request in requests:
        seen.setdefault(id(request), request)
    return list(seen.values())
