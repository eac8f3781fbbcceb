"""Which models a worker loads and which it unloads to make room (pure: no Redis, no torch, the time passed in).

A worker holds at most max_loaded models (0: no count limit) whose measured sizes fit
model_bytes. It loads, in this order: models pinned with keep_loaded; models with
requests waiting that no live worker holds (evicting the least recently used idle models
if it must); a second copy of a model whose backlog stayed high, where there is room
without evicting; and, with room to spare, models nobody asked for yet (fewest holders
first), so a quiet fleet starts with its models spread out and ready.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

MIN_IDLE_S = 0.25  # a model used this recently is not evicted: it would be loaded straight back


@dataclass(frozen=True)
class Held:
    """A model this worker holds (or is loading)."""

    name: str
    size_bytes: int  # measured at load; 0 while unknown
    last_used: float
    busy: bool  # requests of it are queued here or in its channel, or it is computing
    pinned: bool  # keep_loaded
    loading: bool = False


@dataclass(frozen=True)
class Limits:
    """How much one worker may hold."""

    max_loaded: int  # 0: no count limit
    model_bytes: int  # bytes the models may take together; 0: no byte limit


@dataclass(frozen=True)
class Wanted:
    """A model this worker may serve but does not hold, and what the fleet says of it."""

    name: str
    size_bytes: int  # measured on an earlier load (here or reported by another worker); 0 unknown
    pinned: bool
    backlog: int  # requests waiting in its channel
    holders: int  # live workers holding it (other than this one)
    hot: bool = False  # its backlog stayed over the hot threshold


def evictions_for(held: list[Held], incoming_bytes: int, limits: Limits, now: float) -> list[str] | None:
    """The models to unload, least recently used first, so one more model fits; None when it cannot."""
    over_count = len(held) + 1 - limits.max_loaded if limits.max_loaded else 0
    over_bytes = sum(h.size_bytes for h in held) + incoming_bytes - limits.model_bytes if limits.model_bytes else 0
    candidates = sorted(
        (h for h in held if not (h.busy or h.pinned or h.loading) and now - h.last_used >= MIN_IDLE_S),
        key=lambda h: h.last_used,
    )
    chosen: list[str] = []
    for model in candidates:
        if over_count <= 0 and over_bytes <= 0:
            break
        chosen.append(model.name)
        over_count -= 1
        over_bytes -= model.size_bytes
    if over_count > 0 or over_bytes > 0:
        return None
    return chosen


def load_choices(held: list[Held], wanted: list[Wanted], limits: Limits, now: float
                 ) -> Iterator[tuple[str, str, list[str]]]:
    """(model, why, models to unload first) for each load that may start now, the most wanted first."""
    fits = [w for w in wanted if not limits.model_bytes or w.size_bytes <= limits.model_bytes]
    ranked = (
        [(w, "keep_loaded", True) for w in fits if w.pinned]
        + [(w, "demand", True) for w in sorted(fits, key=lambda w: -w.backlog) if w.backlog and not w.holders]
        + [(w, "hot", False) for w in fits if w.hot and w.holders]
        + [(w, "preload", False) for w in sorted(fits, key=lambda w: w.holders) if not w.backlog or w.holders]
    )
    for model, why, may_evict in ranked:
        evict = evictions_for(held, model.size_bytes, limits, now)
        if evict is None or (evict and not may_evict):
            continue
        yield model.name, why, evict


def over_budget(held: list[Held], limits: Limits, now: float) -> list[str]:
    """Idle models to unload because the held ones outgrew the limits (sizes are known only after loading)."""
    excess = sum(h.size_bytes for h in held) - limits.model_bytes if limits.model_bytes else 0
    extra = len(held) - limits.max_loaded if limits.max_loaded else 0
    chosen: list[str] = []
    for model in sorted((h for h in held if not (h.busy or h.pinned or h.loading)
                         and now - h.last_used >= MIN_IDLE_S), key=lambda h: h.last_used):
        if excess <= 0 and extra <= 0:
            break
        chosen.append(model.name)
        excess -= model.size_bytes
        extra -= 1
    return chosen
