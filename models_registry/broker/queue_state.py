"""What this web process last heard of each task's queue: a queue known full is refused before its body is read.

The admission script's answers keep it fresh: a refusal at the interactive limit marks
the task full for FULL_FOR_S (with the depth and Retry-After it was refused with), and
any admitted request clears the mark. While it is marked, a request for the task is
answered 503 at the cost of a /health answer (api.server.before_body), without reading its
body or making a round trip; once the mark is FULL_FOR_S old, one request at a time takes
the full path, so the mark is renewed or cleared by the broker's own answer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

FULL_FOR_S = 0.2
STALE_LIMIT_S = 2.0


@dataclass
class Full:
    """A task's queue as last refused: until when the mark holds, and what the refusal said."""

    until: float
    depth: int
    limit: int
    retry_after_s: int
    asked_at: float | None = None  # when one request was let through to ask the broker again


# (model, task) -> its mark; empty when nothing is full, the test api.server.before_body makes on every request.
marks: dict[tuple[str, str], Full] = {}


def note_full(model: str, task: str, depth: int, limit: int, retry_after_s: int) -> None:
    """The broker refused a request of model/task: its queue held depth items (limit limit)."""
    marks[(model, task)] = Full(time.monotonic() + FULL_FOR_S, depth, limit, retry_after_s)


def note_admitted(model: str, task: str) -> None:
    """The broker admitted a request of model/task: its queue has room."""
    if marks:
        marks.pop((model, task), None)


def known_full(model: str, task: str) -> Full | None:
    """The mark of model/task while it holds, else None: this request goes to the broker.

    Once a mark is stale, ONE request is let through to ask the broker (its answer renews or
    clears the mark) while the others are still refused from the mark: were they all let
    through until that answer came, every refresh would send a wave of full-path requests
    under a burst. A request that never got its answer (it failed earlier) lets another
    through after FULL_FOR_S; a mark nobody renews in STALE_LIMIT_S is dropped.
    """
    if not marks:
        return None
    mark = marks.get((model, task))
    if mark is None:
        return None
    now = time.monotonic()
    if now < mark.until:
        return mark
    if now >= mark.until + STALE_LIMIT_S:
        marks.pop((model, task), None)
        return None
    if mark.asked_at is None or now - mark.asked_at >= FULL_FOR_S:
        mark.asked_at = now
        return None
    return mark


def reset() -> None:
    """Forget every mark (tests)."""
    marks.clear()
