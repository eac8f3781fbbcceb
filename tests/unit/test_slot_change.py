"""worker.slot_change: what a registry refresh does to a held model; adapters come and go without a reload (pure)."""

from __future__ import annotations

from dataclasses import replace

from models_registry.catalog.specs import AdapterSpec, ModelSpec, TaskSpec
from models_registry.core.batch_types import BatchPolicy
from models_registry.worker.slot_change import SlotChange, slot_change


def base(*adapters: tuple[str, str]) -> ModelSpec:
    task = TaskSpec(name="feature-extraction", task="feature-extraction", parameters={}, pooling="mean",
                    normalize=False, policy=BatchPolicy(), timeout_s=5.0)
    return ModelSpec(name="embed", source="example/embed", revision="", device="cpu", dtype="float32", enabled=True,
                     tasks={task.name: task}, default_task=task.name,
                     adapters=tuple(AdapterSpec(name, source) for name, source in adapters))


def test_a_first_adapter_a_second_a_replaced_one_and_the_last_ones_removal_are_applied_in_place() -> None:
    views = [base(), base(("alpha", "/a")), base(("alpha", "/a"), ("beta", "/b")),
             base(("alpha", "/a"), ("beta", "/b2")), base(("beta", "/b2")), base()]
    assert [slot_change(held, listed) for held, listed in zip(views, views[1:])] == [SlotChange.APPLY] * 5
    assert slot_change(views[2], views[2]) == SlotChange.KEEP


def test_what_the_model_computes_or_its_absence_still_reloads_it() -> None:
    held = base(("alpha", "/a"))
    for changed in (replace(held, source="example/other"), replace(held, dtype="float16"),
                    replace(held, backend="torch"), replace(held, load_generation=1), replace(held, revision="v2")):
        assert slot_change(held, changed) == SlotChange.RELOAD
    assert slot_change(held, None) == SlotChange.RELOAD
    assert slot_change(held, replace(held, tasks={})) == SlotChange.APPLY  # tasks change in place, as before
