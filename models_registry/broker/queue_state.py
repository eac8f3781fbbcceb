"""What this web process last heard of each task's queue: a queue known full is refused before its body is read.

The admission script's answers keep it fresh: a refusal at the interactive limit, or an
admission that filled the queue to it, marks the task full for FULL_FOR_S (with the depth
and Retry-After it was refused with), and any other admitted request clears the mark. While it is marked, a request for the task is
answered 503 at the cost of a /health answer (api.fast_refusal), without reading its
body or making a round trip; one request every FULL_FOR_S still takes the full path, so
the mark is renewed or cleared by the broker's own answer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

FULL_FOR_S = 0.2


@dataclass(frozen=True)
class Full:
    """A task's queue as last refused: until when the mark holds, and what the refusal said."""

    until: float
    depth: int
    limit: int
    retry_after_s: int


_full: dict[tuple[str, str], Full] = {}


def note_full(model: str, task: str, depth: int, limit: int, retry_after_s: int) -> None:
    """The broker refused a request of model/task: its queue held depth items (limit limit)."""
    _full[(model, task)] = Full(time.monotonic() + FULL_FOR_S, depth, limit, retry_after_s)


def note_admitted(model: str, task: str) -> None:
    """The broker admitted a request of model/task: its queue has room."""
    if _full:
        _full.pop((model, task), None)


def known_full(model: str, task: str) -> Full | None:
    """The mark of model/task while it holds, else None (and the stale mark is dropped)."""
    if not _full:
        return None
    mark = _full.get((model, task))
    if mark is None:
        return None
    if time.monotonic() >= mark.until:
        _full.pop((model, task), None)  # the next request asks the broker again
        return None
    return mark


def any_full() -> bool:
    """Whether any task is marked (the cheap first test on every request)."""
    return bool(_full)


def reset() -> None:
    """Forget every mark (tests)."""
    _full.clear()
