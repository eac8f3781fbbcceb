"""catalog.fleet_readiness: /ready's verdict over the fleet, from a workers' view and the registry (pure)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from models_registry.catalog.fleet_readiness import FleetReadiness, assess
from models_registry.catalog.lookups import WorkerView


def spec(enabled: bool = True, tasks: tuple[str, ...] = ("embed",)) -> Any:
    """A registered model as assess reads one."""
    return SimpleNamespace(enabled=enabled, tasks=dict.fromkeys(tasks), base="")


def worker(serves: tuple[str, ...] = (), draining: bool = False) -> Any:
    """A live worker's heartbeat as assess reads one (serves nothing named: every enabled model)."""
    return SimpleNamespace(serve_models=list(serves), draining=draining)


def view(states: dict[str, dict[str, Any]], *workers: Any) -> WorkerView:
    return WorkerView(workers=list(workers), model_states=states, drain_rates={})


def test_a_model_loading_at_start_holds_readiness_though_another_is_ready() -> None:
    # Issue 50: 200 with models_ready_count 1 and 2 not served, while those two answered "is loading" for 68 s.
    specs = {"a": spec(), "b": spec(), "c": spec()}
    fleet = assess(specs, view({"a": {"state": "ready"}, "b": {"state": "loading"}}, worker()))
    assert fleet == FleetReadiness(ready=["a"], on_demand=[], not_ready=["b", "c"], not_served=[])
    assert fleet.serves_any and not fleet.serves_all_meant


def test_a_worker_that_has_not_read_the_registry_yet_serves_nothing_it_is_meant_to() -> None:
    fleet = assess({"a": spec(), "b": spec()}, view({}, worker()))
    assert fleet.not_ready == ["a", "b"] and not fleet.serves_any


def test_ready_on_one_live_worker_is_enough() -> None:
    states = {"a": {"state": "ready"}}  # the view's best state over the workers: one ready, one loading
    fleet = assess({"a": spec()}, view(states, worker(), worker()))
    assert fleet.serves_all_meant and fleet.ready == ["a"]


def test_loadable_on_demand_counts_and_a_failed_load_does_not() -> None:
    specs = {"cold": spec(), "warming": spec(), "broken": spec()}
    states = {"cold": {"state": "available"}, "warming": {"state": "loading", "on_demand": True},
              "broken": {"state": "error", "error": "no such file"}}
    fleet = assess(specs, view(states, worker()))
    assert (fleet.on_demand, fleet.not_ready) == (["cold", "warming"], ["broken"])


def test_only_the_models_some_live_workers_scope_takes_in_are_waited_for() -> None:
    specs = {"small": spec(), "big": spec(), "off": spec(enabled=False), "bare": spec(tasks=())}
    fleet = assess(specs, view({"small": {"state": "ready"}}, worker(serves=("small",))))
    assert fleet == FleetReadiness(ready=["small"], on_demand=[], not_ready=[], not_served=["bare", "big"])
    fleet = assess(specs, view({"small": {"state": "ready"}}, worker(serves=("small",)), worker(serves=("big",))))
    assert fleet.not_ready == ["big"] and fleet.not_served == ["bare"]


def test_a_model_whose_only_worker_drains_is_not_ready() -> None:
    # The view's states leave draining workers out; their scope still says what the fleet is meant to serve.
    fleet = assess({"a": spec()}, view({}, worker(draining=True)))
    assert fleet.not_ready == ["a"]


def test_without_live_workers_nothing_is_meant_and_nothing_served() -> None:
    fleet = assess({"a": spec()}, view({}))
    assert fleet.not_served == ["a"] and fleet.serves_all_meant and not fleet.serves_any


def test_an_adapter_is_ready_where_its_base_is_and_never_waited_for_alone() -> None:
    specs = {"base": spec(), "lora": SimpleNamespace(enabled=True, tasks=dict.fromkeys(("embed",)), base="base")}
    fleet = assess(specs, view({"base": {"state": "ready"}}, worker()))
    assert fleet == FleetReadiness(ready=["base"], on_demand=[], not_ready=[], not_served=[])
    assert fleet.serves_all_meant
