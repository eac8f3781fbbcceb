"""What the decode scheduler decided for one step, as values: who leaves, who joins where, what each forward computes.

inference.decode_scheduler makes a Plan at the start of each step and a Forward at a time;
the executor (inference.generation_batch) applies them to the KV cache and the model and
reports back how long each forward took. Rows are the executor's objects, named by their
ids when a plan is printed (`describe`), so a plan can be read and compared in tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from models_registry.inference.slot_table import Seat


@dataclass(frozen=True)
class Copy:
    """Keys and values of a head to copy before a forward: `tokens` positions of slot source into slot target."""

    source: int
    target: int
    tokens: int


@dataclass(frozen=True)
class Chunk:
    """Prompt tokens of one row computed in a forward: fill[start:start + count] at positions start..."""

    row: Any
    start: int
    count: int
    draws: bool  # its prompt completes here and it draws its first token from the chunk's last


@dataclass
class Forward:
    """One forward of the model: a token for each decoding row (in slot order), then the prompt chunks."""

    decoding: list[Any] = field(default_factory=list)
    chunks: list[Chunk] = field(default_factory=list)
    copies: list[Copy] = field(default_factory=list)  # heads copied before it (a row that waited for a shared one)
    lane: bool = False  # the fast lane's: a few short rows alone, measured apart from the batch's forwards

    @property
    def tokens(self) -> int:
        """Tokens computed: one per decoding row plus every chunk."""
        return len(self.decoding) + sum(chunk.count for chunk in self.chunks)

    @property
    def drawing(self) -> list[Any]:
        """The rows that draw a token from this forward, in the order of its kept logits."""
        return [*self.decoding, *(chunk.row for chunk in self.chunks if chunk.draws)]

    def describe(self) -> dict[str, Any]:
        """The forward as plain values: rows by id."""
        return {"decode": [r.id for r in self.decoding],
                "chunks": [(c.row.id, c.start, c.count, c.draws) for c in self.chunks],
                "copies": [(c.source, c.target, c.tokens) for c in self.copies], "lane": self.lane}


@dataclass
class Plan:
    """The changes at the start of one step, and its first forward (None: no row has anything to compute)."""

    finished: list[Any] = field(default_factory=list)  # rows that left done (finished, cancelled) before any forward
    preempted: list[Any] = field(default_factory=list)  # rows that yield their slots (fair share); they wait again
    seats: list[tuple[Any, Seat]] = field(default_factory=list)  # joining rows: their slot and the head they copy
    forward: Forward | None = None

    def describe(self) -> dict[str, Any]:
        """The plan as plain values: rows by id."""
        return {"finished": [r.id for r in self.finished], "preempted": [r.id for r in self.preempted],
                "seats": [(r.id, s.slot, s.source, s.reused) for r, s in self.seats],
                "forward": self.forward.describe() if self.forward is not None else None}
