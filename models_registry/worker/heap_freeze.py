"""A worker's loaded models kept out of the garbage collector's full walks, and given back to it on an unload.

A worker holding torch, transformers and its models tracks about 480,000 objects; every full collection
walked them all (0.3 s of CPU each on 2 cores, docs/bench/otel-cpu-2core.md), during which the worker
answered nothing. A model lives as long as it is held, so once a load completes the heap is frozen
(gc.freeze: its objects leave the collector's generations; reference counting still frees them). An
unload thaws it first, or the unloaded model's reference cycles (torch modules hold some) would outlive it.
"""

from __future__ import annotations

import gc
import logging
from typing import Protocol

logger = logging.getLogger(__name__)


class Collector(Protocol):
    """The part of the gc module this uses (a test passes a recorder)."""

    def collect(self) -> int: ...

    def freeze(self) -> None: ...

    def unfreeze(self) -> None: ...

    def get_freeze_count(self) -> int: ...


def settle_after_load(collector: Collector = gc) -> None:
    """Collect what the load left behind, then freeze what survives: the models held, this process' modules."""
    collector.collect()  # a load's cyclic garbage, frozen with the rest, would stay until the next unload
    collector.freeze()
    logger.debug("heap frozen after a load: %d objects out of the collector's walks", collector.get_freeze_count())


def release_after_unload(models_left: int, collector: Collector = gc) -> None:
    """Thaw the heap and collect the unloaded model now; freeze again what the models still held keep."""
    collector.unfreeze()
    collector.collect()  # the model's tensors go now, not at some later collection
    if models_left:
        collector.freeze()
