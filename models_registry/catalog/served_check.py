"""Whether a model version a request waits on is still served: the hand-off asks it of a value, every second."""

from __future__ import annotations

from dataclasses import dataclass

from models_registry.catalog import lookups
from models_registry.core.model_state import ModelState, servable


@dataclass(frozen=True)
class ServedVersion:
    """The version a request was handed to: its model's name, the wire name it was queued under, its version."""

    model: str
    wire: str
    version: int = 0  # 0: a model without versions


async def still_served(served: ServedVersion) -> bool:
    """Whether a live worker serves the wire name, or will: a version the registry still lists reloads.

    A rollback to the version just retired sends requests there before every worker holds it again:
    its queue waits for it, unless it failed to load or no worker is alive at all.
    """
    view = await lookups.get_workers()
    state = view.model_states.get(served.wire)
    if servable(state) or not served.version:
        return servable(state)
    if (state or {}).get("state") == ModelState.ERROR or not view.workers:
        return False
    current = (await lookups.get_specs()).get(served.model)
    return current is not None and served.version in current.rollout.held()
