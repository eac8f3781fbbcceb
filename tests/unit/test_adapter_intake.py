"""worker.intake's adapter check: a request naming an adapter its base's slot does not list is refused, not run on
the base; the catalog's adapter entries stand for their base (pure: no model is loaded)."""

from __future__ import annotations

import pytest

from models_registry.broker.messages import WorkRequest
from models_registry.catalog.specs import AdapterSpec, ModelSpec, TaskSpec, adapter_entries, worker_specs
from models_registry.core.batch_types import BatchPolicy
from models_registry.core.errors import Unavailable
from models_registry.core.model_state import ModelState
from models_registry.worker.intake import check_servable
from models_registry.worker.model_slots import ModelSlot


def base(*adapters: str) -> ModelSpec:
    tasks = {kind: TaskSpec(name=kind, task=kind, parameters={}, pooling="mean", normalize=False,
                            policy=BatchPolicy(), timeout_s=5.0) for kind in ("feature-extraction", "fill-mask")}
    return ModelSpec(name="embed", source="example/embed", revision="", device="cpu", dtype="float32", enabled=True,
                     tasks=tasks, default_task="fill-mask",
                     adapters=tuple(AdapterSpec(name, f"/adapters/{name}") for name in adapters))


def request(adapter: str) -> WorkRequest:
    return WorkRequest(id="1", reply="r", model="embed", task="feature-extraction", inputs=["x"], parameters={},
                       deadline=1e12, adapter=adapter)


def test_an_adapter_the_slot_lists_is_admitted_and_an_unknown_one_is_refused() -> None:
    slot = ModelSlot(spec=base("alpha"), state=ModelState.READY)
    assert check_servable(request("alpha"), slot, draining=False) is slot
    assert check_servable(request(""), slot, draining=False) is slot
    with pytest.raises(Unavailable, match="adapter 'beta' of model 'embed' is not served by this worker"):
        check_servable(request("beta"), slot, draining=False)


def test_an_adapter_entry_is_its_base_with_the_tasks_adapters_change() -> None:
    entries = adapter_entries(base("alpha", "beta"))
    alpha = entries["alpha"]
    assert (alpha.name, alpha.served_as, alpha.adapter) == ("alpha", "embed", AdapterSpec("alpha", "/adapters/alpha"))
    assert list(alpha.tasks) == ["feature-extraction"] and alpha.default_task == "feature-extraction"
    assert set(worker_specs({"embed": base("alpha", "beta"), **entries})) == {"embed"}
    assert base().load_key() == base("alpha").load_key() == base("alpha", "beta").load_key()  # no reload for one
