"""The worker's heap frozen once a model loads, thawed for an unload's collection (worker.heap_freeze)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from models_registry.worker import heap_freeze


class Recorder:
    """A collector that records what was asked of it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def collect(self) -> int:
        self.calls.append("collect")
        return 0

    def freeze(self) -> None:
        self.calls.append("freeze")

    def unfreeze(self) -> None:
        self.calls.append("unfreeze")

    def get_freeze_count(self) -> int:
        return 0


class Model:
    """Stands for a loaded model: an object in a reference cycle, as torch modules are."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def thawed() -> Iterator[None]:
    """This test process' heap unfrozen before and after (the test freezes the real collector)."""
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_a_load_collects_its_garbage_then_freezes() -> None:
    recorder = Recorder()
    heap_freeze.settle_after_load(recorder)
    assert recorder.calls == ["collect", "freeze"]


def test_an_unload_thaws_before_it_collects_and_freezes_again_only_for_models_left() -> None:
    recorder = Recorder()
    heap_freeze.release_after_unload(models_left=2, collector=recorder)
    assert recorder.calls == ["unfreeze", "collect", "freeze"]
    recorder.calls.clear()
    heap_freeze.release_after_unload(models_left=0, collector=recorder)
    assert recorder.calls == ["unfreeze", "collect"]


def test_a_frozen_model_is_out_of_the_collector_until_its_unload(thawed: None) -> None:
    model = Model()
    alive = weakref.ref(model)
    heap_freeze.settle_after_load()
    assert gc.get_freeze_count() > 0
    del model
    gc.collect()  # a full collection walks nothing frozen: the unloaded model's cycle would stay
    assert alive() is not None
    heap_freeze.release_after_unload(models_left=0)
    assert alive() is None
    assert gc.get_freeze_count() == 0
