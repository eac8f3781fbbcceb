"""Who runs in a model's decode batch, and when (pure: no torch, no event loop).

Requests wait here after they were read, and join the batch at the next token step
while there is a free row and the KV cache, padded to its longest row, stays within
the token budget. Waiting requests are taken by priority (a batch-priority one that
waited AGING_S counts as interactive), then the client with the fewest rows running,
then arrival; a long request is not passed by later short ones. Joining is not bounded by
prompt length: the batch prefills long prompts in chunks, a few per step.

Fair share: when the head of the queue cannot join, a row that ranks behind it yields
at the next step (it is preempted: its prompt and tokens are kept, its cache is dropped
and recomputed when it joins again, as vLLM does). A row ranks behind when its priority
is lower, or when it is of the same priority and its client holds at least two rows more
than the waiting request's client, so one client never holds more than its share while
another waits, and shares settle without rows going back and forth. One row yields per
step: the rows already running keep their pace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
AGING_S = 5.0
RANKS = {"interactive": 0, "batch": 1}


@dataclass(eq=False)
class Entry(Generic[T]):
    """One request for the decode batch: the KV tokens it may need and who sent it."""

    id: str
    tokens: int  # prompt + most new tokens: its cache row at its longest
    prompt_tokens: int  # tokens to compute before it decodes: its prompt (and its tokens so far, once preempted)
    arrival: float
    payload: T
    priority: str = "interactive"
    client: str = ""
    preempted: int = 0  # how often it yielded its row


@dataclass
class Turn(Generic[T]):
    """What changes at one step: the entries that yield their rows, and those that join (in prefill order)."""

    preempted: list[Entry[T]] = field(default_factory=list)
    joined: list[Entry[T]] = field(default_factory=list)


class DecodeQueue(Generic[T]):
    """The waiting and running entries of one model's decode batch."""

    def __init__(self, max_rows: int, token_budget: int = 0, prefill_tokens: int = 0) -> None:
        self.max_rows = max_rows
        self.token_budget = token_budget  # 0: no budget (rows alone bound the batch)
        self.prefill_tokens = prefill_tokens  # prompt tokens joining per step (0: any; the batch prefills in chunks)
        self.waiting: list[Entry[T]] = []
        self.running: dict[str, Entry[T]] = {}

    def fits_alone(self, entry: Entry[T]) -> bool:
        """Whether entry could ever run (its row alone within the budget)."""
        return not self.token_budget or entry.tokens <= self.token_budget

    def add(self, entry: Entry[T]) -> None:
        """Queue entry to join at a coming step (fits_alone must hold)."""
        if not self.fits_alone(entry):
            raise ValueError(f"entry {entry.id} needs {entry.tokens} tokens, over the budget {self.token_budget}")
        self.waiting.append(entry)

    def next_turn(self, now: float) -> Turn[T]:
        """The step's changes: at most one row yields to the waiting head, then those that fit join."""
        preempted = self._preempt(now)
        return Turn(preempted=preempted, joined=self.admit(now))

    def admit(self, now: float) -> list[Entry[T]]:
        """The entries that join now (moved to running), in the order to prefill them."""
        joined: list[Entry[T]] = []
        prefill = 0
        while self.waiting:
            entry = self._ordered(now)[0]  # again after each pick: the client counts changed
            if self.prefill_tokens and joined and prefill + entry.prompt_tokens > self.prefill_tokens:
                break  # the rest join at the next step: running rows keep their pace
            if not self._fits(entry):
                break  # in order: a long request is not passed forever by short ones
            self.waiting.remove(entry)
            self.running[entry.id] = entry
            joined.append(entry)
            prefill += entry.prompt_tokens
        return joined

    def leave(self, entry_id: str) -> Entry[T] | None:
        """entry_id is done, cancelled or failed: its row and tokens are free at once."""
        entry = self.running.pop(entry_id, None)
        if entry is None:
            entry = next((e for e in self.waiting if e.id == entry_id), None)
            if entry is not None:
                self.waiting.remove(entry)
        return entry

    def padded_tokens(self, extra: Entry[T] | None = None) -> int:
        """KV tokens of the batch at its longest: rows times the longest row (padding included)."""
        rows = list(self.running.values()) + ([extra] if extra is not None else [])
        return len(rows) * max((e.tokens for e in rows), default=0)

    def rows_by_client(self) -> dict[str, int]:
        """Running rows per client."""
        counts: dict[str, int] = {}
        for entry in self.running.values():
            counts[entry.client] = counts.get(entry.client, 0) + 1
        return counts

    def _fits(self, entry: Entry[T]) -> bool:
        if len(self.running) >= self.max_rows:
            return False
        return not self.token_budget or self.padded_tokens(entry) <= self.token_budget

    def _preempt(self, now: float) -> list[Entry[T]]:
        """The one running entry that yields its row to the waiting head, if one ranks behind it."""
        if not self.waiting:
            return []
        head = self._ordered(now)[0]
        if self._fits(head):
            return []
        counts = self.rows_by_client()
        level = self._level(head, now)
        own = counts.get(head.client, 0)

        def behind(entry: Entry[T]) -> bool:
            if entry.client == head.client:
                return False
            theirs = self._level(entry, now)
            return theirs > level or (theirs == level and counts[entry.client] >= own + 2)

        candidates = [e for e in self.running.values() if behind(e)]
        if not candidates:
            return []
        # The lowest priority first, then the client with the most rows, then the latest (least work to redo).
        victim = max(candidates, key=lambda e: (self._level(e, now), counts[e.client], e.arrival))
        del self.running[victim.id]
        victim.preempted += 1
        self.waiting.append(victim)
        return [victim]

    def _level(self, entry: Entry[T], now: float) -> int:
        level = RANKS.get(entry.priority, 0)
        return 0 if now - entry.arrival >= AGING_S else level

    def _ordered(self, now: float) -> list[Entry[T]]:
        counts = self.rows_by_client()

        def rank(entry: Entry[T]) -> tuple[int, int, float]:
            return self._level(entry, now), counts.get(entry.client, 0) if entry.client else 0, entry.arrival

        return sorted(self.waiting, key=rank)
