"""Who joins a running decode batch, and when (pure: no torch, no event loop).

Requests wait here after they were read, and join the batch at the next token step
while there is a free row and the KV cache, padded to its longest row, stays within
the token budget. Waiting requests are taken by priority (a batch-priority one that
waited AGING_S counts as interactive), then the client with the fewest rows running,
then arrival: one client's many long answers cannot hold every row while others wait.
Prefill is bounded per step so that rows already running keep their pace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
AGING_S = 5.0
RANKS = {"interactive": 0, "batch": 1}


@dataclass(eq=False)
class Entry(Generic[T]):
    """One request for the decode batch: the KV tokens it may need and who sent it."""

    id: str
    tokens: int  # prompt + most new tokens: its cache row at its longest
    prompt_tokens: int
    arrival: float
    payload: T
    priority: str = "interactive"
    client: str = ""


class DecodeSchedule(Generic[T]):
    """The waiting and running entries of one model's decode batch."""

    def __init__(self, max_rows: int, token_budget: int = 0, prefill_tokens: int = 2048) -> None:
        self.max_rows = max_rows
        self.token_budget = token_budget  # 0: no budget (rows alone bound the batch)
        self.prefill_tokens = prefill_tokens
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

    def admit(self, now: float) -> list[Entry[T]]:
        """The entries that join now (moved to running), in the order to prefill them."""
        joined: list[Entry[T]] = []
        prefill = 0
        while self.waiting:
            entry = self._ordered(now)[0]  # again after each pick: the client counts changed
            if len(self.running) >= self.max_rows:
                break
            if joined and prefill + entry.prompt_tokens > self.prefill_tokens:
                break  # the rest join at the next step: running rows keep their pace
            if not self._room_for(entry):
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

    def _room_for(self, entry: Entry[T]) -> bool:
        return not self.token_budget or self.padded_tokens(entry) <= self.token_budget

    def _ordered(self, now: float) -> list[Entry[T]]:
        running_by_client: dict[str, int] = {}
        for entry in self.running.values():
            running_by_client[entry.client] = running_by_client.get(entry.client, 0) + 1

        def rank(entry: Entry[T]) -> tuple[int, int, float]:
            level = RANKS.get(entry.priority, 0)
            if now - entry.arrival >= AGING_S:
                level = 0
            return level, running_by_client.get(entry.client, 0) if entry.client else 0, entry.arrival

        return sorted(self.waiting, key=rank)
