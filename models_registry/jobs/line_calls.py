"""What a job driver needs of whatever runs its lines: a caller answering each line as its url's route would."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from models_registry.jobs.lines import JobLine


@dataclass(frozen=True)
class LineAnswer:
    """What the route answered."""

    status: int
    body: bytes
    retry_after_s: float | None = None


class LineCalls(Protocol):
    """Runs one line as the job's owner (api.line_caller.LineCaller; tests give their own)."""

    async def call(self, line: JobLine, owner_id: int | None, request_id: str) -> LineAnswer:
        """The answer the line's request would get over HTTP."""
