"""Which version of a model answers a request (pure: no database, no Redis).

Workers hold each version they must serve under its own wire name, "<model>.v<N>" (model
names are slugs, so the dot is unambiguous): its own work channel, queues and slot. The web
picks a version per request: the live one; the target once it is ready on every worker
serving the model (the switch, in one step); the canary for its share of requests.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from models_registry.core.model_state import ModelState

CANARY, SHADOW = "canary", "shadow"
_SEP = ".v"


def wire_name(model: str, version: int) -> str:
    """The name workers, channels and queues know one version by ("mini.v3"); version 0: the model's own name."""
    return f"{model}{_SEP}{version}" if version else model


def split_wire(wire: str) -> tuple[str, int]:
    """wire_name's inverse: ("mini", 3) from "mini.v3", ("mini", 0) from "mini"."""
    model, sep, number = wire.rpartition(_SEP)
    if sep and model and number.isdigit():
        return model, int(number)
    return wire, 0


@dataclass(frozen=True)
class Rollout:
    """A model's versions as the registry states them (0: none)."""

    live: int = 0
    target: int = 0  # replaces live once ready everywhere
    previous: int = 0  # live before the last switch (rollback returns to it)
    candidate: int = 0  # beside live: a canary or a shadow
    mode: str = ""  # CANARY or SHADOW when there is a candidate
    percent: int = 0  # the candidate's share of requests, 0-100
    sticky: bool = False  # the canary split by API token rather than per request

    def held(self) -> list[int]:
        """The versions workers must hold now, live first."""
        return list(dict.fromkeys(v for v in (self.live, self.target, self.candidate) if v))


def serving(rollout: Rollout, ready: set[int]) -> int:
    """The version that answers the model's requests (the canary's share aside).

    The target once ready; else live; else, right after a switch, the previous version while
    this process's view of the workers (refreshed apart from its view of the registry) does
    not show the new live one ready yet: workers keep a replaced version a few refreshes.
    Nothing ready (a first load): live, which answers 503 until it is.
    """
    for version in (rollout.target, rollout.live, rollout.previous):
        if version and version in ready:
            return version
    return rollout.live


def draw(sticky_key: str | None, fallback: float) -> float:
    """A number in [0, 1) that splits requests: the same for one key (a token), else fallback (random)."""
    if sticky_key is None:
        return fallback
    digest = hashlib.sha256(sticky_key.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def choose(rollout: Rollout, ready: set[int], share: float) -> int:
    """The version answering one request; share is draw()'s number."""
    if rollout.mode == CANARY and rollout.candidate in ready and share * 100 < rollout.percent:
        return rollout.candidate
    return serving(rollout, ready)


def pick(model: str, rollout: Rollout, ready: set[int], sticky_key: str | None, share: float,
         shadow_share: float) -> tuple[int, str, int]:
    """(version, its wire name, the version a copy goes to or 0) for one request; shares: two random numbers."""
    version = choose(rollout, ready, draw(sticky_key if rollout.sticky else None, share))
    return version, wire_name(model, version), shadow_of(rollout, ready, shadow_share)


def shadow_of(rollout: Rollout, ready: set[int], share: float) -> int:
    """The version a copy of the request goes to (0: none)."""
    if rollout.mode == SHADOW and rollout.candidate in ready and share * 100 < rollout.percent:
        return rollout.candidate
    return 0


def ready_everywhere(reports: Iterable[dict[str, Any]]) -> dict[str, set[int]]:
    """{model: versions READY on every worker that serves the model}, from each live worker's models_state.

    A worker serves a model when it holds or loads any of its versions; a worker that could
    load it on demand but holds none does not count (it would load whichever is asked). A
    version retiring on a worker (its registry view dropped it) is not ready there: that view
    may be older than a rollback to it, and the worker unloads it a few refreshes later, so
    switching to it, or routing to it as the target, would flip back to the version before.
    """
    serving_workers: dict[str, int] = {}
    ready_counts: dict[tuple[str, int], int] = {}
    for models_state in reports:
        held: set[str] = set()
        for wire, state in (models_state or {}).items():
            model, version = split_wire(wire)
            if state.get("state") not in (ModelState.READY, ModelState.LOADING):
                continue
            held.add(model)
            if state.get("state") == ModelState.READY and not state.get("retiring"):
                ready_counts[(model, version)] = ready_counts.get((model, version), 0) + 1
        for model in held:
            serving_workers[model] = serving_workers.get(model, 0) + 1
    ready: dict[str, set[int]] = {}
    for (model, version), count in ready_counts.items():
        if count == serving_workers.get(model):
            ready.setdefault(model, set()).add(version)
    return ready
