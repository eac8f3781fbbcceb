"""What a registry refresh does to a model this worker holds: keep it, apply new settings, or reload it (pure)."""

from __future__ import annotations

from enum import Enum

from models_registry.catalog.specs import ModelSpec


class SlotChange(str, Enum):
    """A held model's fate at a refresh."""

    KEEP = "keep"  # nothing changed
    APPLY = "apply"  # settings, tasks or adapters changed: applied to the loaded model in place
    RELOAD = "reload"  # what it computes changed (its load key), or it is no longer listed: unloaded


def slot_change(held: ModelSpec, listed: ModelSpec | None) -> SlotChange:
    """What the refresh does to a slot loaded from held, now that the registry lists listed (None: not listed).

    Adapters are not in the load key: a first adapter, a replaced one or the last one removed are
    applied in place (their rows run the loaded base's eager forward), so the base never reloads for one.
    """
    if listed is None or listed.load_key() != held.load_key():
        return SlotChange.RELOAD
    return SlotChange.KEEP if listed == held else SlotChange.APPLY
