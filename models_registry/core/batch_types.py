"""What the batcher works with (pure data): a task's queue settings, requests and their items, batches,
per-item failures, and the queue's errors.

Requests, items and batches are generic in D, what the caller attaches to each request and
gets back with it (the worker's worker.delivery.Delivery); the batcher never looks inside.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

Key = Hashable  # (model name, task name): a registry.task_key.TaskKey in the worker
D = TypeVar("D")  # what the caller attaches to a request (opaque to the batcher)


class QueueFull(Exception):
    """The queue for this key holds max_queue_size items already."""

    def __init__(self, key: Key, depth: int, limit: int) -> None:
        super().__init__(f"queue for {key} is full ({depth}/{limit} items)")
        self.key, self.depth, self.limit = key, depth, limit


class UnknownKey(Exception):
    """No policy was set for this key: the model or task is not served here."""


@dataclass(frozen=True)
class BatchPolicy:
    """Queue settings of one task (the ModelTask fields of the same names)."""

    max_batch_size: int = 32
    max_batch_tokens: int = 0  # 0 = no token budget
    max_batch_delay_s: float = 0.005
    max_queue_size: int = 1024

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ValueError("max_batch_size must be at least 1")
        if self.max_batch_tokens < 0:
            raise ValueError("max_batch_tokens must be 0 (no budget) or positive")
        if self.max_batch_delay_s < 0:
            raise ValueError("max_batch_delay_s must not be negative")
        if self.max_queue_size < 1:
            raise ValueError("max_queue_size must be at least 1")


@dataclass(frozen=True)
class ItemFailure:
    """The result slot of an item that failed; fails the request that owns it."""

    error: Exception


@dataclass(eq=False)
class PendingRequest(Generic[D]):
    """One accepted request: its items may be spread over several batches."""

    id: str
    key: Key
    n_items: int
    arrival: float
    deadline: float
    delivery: D  # the caller's: where the answer goes, with what came with the request
    outputs: list[Any] = field(default_factory=list)
    remaining: int = 0
    error: Exception | None = None
    done: bool = False
    started_at: float | None = None  # when its first item entered a batch
    batch_sizes: list[int] = field(default_factory=list)
    priority: str = "interactive"


@dataclass(eq=False)
class Item(Generic[D]):
    """One input of a request, the unit the batcher packs."""

    request: PendingRequest[D]
    index: int
    payload: Any
    cost: int  # tokens (or a proxy): drives length sorting and the token budget
    arrival: float
    seq: int


@dataclass
class Batch(Generic[D]):
    """Items to run together through one model task."""

    key: Key
    items: list[Item[D]]
    reason: str  # what closed it: size, tokens, delay, idle

    def __len__(self) -> int:
        return len(self.items)

    @property
    def padded_tokens(self) -> int:
        """Tokens the forward pass computes once inputs are padded to the longest."""
        return max([i.cost for i in self.items], default=0) * len(self.items)  # a list: no generator frame an item
