"""Requests naming an adapter this worker's registry view does not list yet: held until a refresh lists it.

The web may read a new adapter from the registry up to one refresh before this worker does; its
first requests wait here (leased, as any request held) rather than answer 503. A request whose
adapter is still not listed after WAIT_REFRESHES refreshes (removed, or never served here) is taken
again all the same, and intake answers it the 503 it gives an unknown adapter. A version newer than
the live files this view lists waits the same way; one older (replaced since) does not: the live
files compute it (ModelSpec.adapter_for).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from models_registry.broker.messages import WorkRequest
from models_registry.core.model_state import ModelState
from models_registry.worker.delivery import Lease
from models_registry.worker.model_slots import ModelSlot

WAIT_REFRESHES = 3  # web and worker views of the registry are each up to one refresh old: margin for both


def waits_for_listing(request: WorkRequest, slot: ModelSlot | None, since: int, refreshes: int) -> bool:
    """Whether request, waiting since refresh since, still waits: its ready base's slot does not list its adapter."""
    unlisted = bool(request.adapter) and slot is not None and slot.state == ModelState.READY \
        and slot.spec.awaits_adapter(request.adapter)
    return unlisted and refreshes - since < WAIT_REFRESHES


@dataclass(frozen=True)
class Waiting:
    """One held request, the refresh count when it began to wait and the one it was last looked at."""

    request: WorkRequest
    lease: Lease
    since: int
    looked: int


@dataclass
class AdapterWaits:
    """The requests waiting for their adapter to be listed, in arrival order."""

    waiting: list[Waiting] = field(default_factory=list)

    def hold(self, request: WorkRequest, lease: Lease, since: int, refreshes: int) -> None:
        """Keep request (and its lease) until the next refresh."""
        self.waiting.append(Waiting(request, lease, since, refreshes))

    def due(self, refreshes: int) -> list[Waiting]:
        """The requests to look at again: those held before the latest refresh (in arrival order)."""
        due = [w for w in self.waiting if w.looked < refreshes]
        self.waiting = [w for w in self.waiting if w.looked >= refreshes]
        return due

    def __len__(self) -> int:
        return len(self.waiting)
