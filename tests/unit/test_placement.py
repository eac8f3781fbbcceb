"""Which model a worker loads next and which idle ones it unloads for it (pure placement rules)."""

from __future__ import annotations

from typing import Any

from models_registry.capacity.placement_plan import (
    MIN_IDLE_S,
    Held,
    Limits,
    Wanted,
    evictions_for,
    load_choices,
    over_budget,
)

NOW = 1000.0
OLD = NOW - 10 * MIN_IDLE_S


def held(name: str, last_used: float = OLD, size: int = 100, busy: bool = False, pinned: bool = False) -> Held:
    return Held(name, size, last_used, busy=busy, pinned=pinned)


def wanted(name: str, backlog: int = 0, holders: int = 0, pinned: bool = False, size: int = 100,
           hot: bool = False) -> Wanted:
    return Wanted(name, size, pinned, backlog, holders, hot=hot)


def first(held_models: list[Held], wanted_models: list[Wanted], limits: Limits) -> tuple[str, str, list[str]] | None:
    return next(load_choices(held_models, wanted_models, limits, NOW), None)


def test_the_least_recently_used_idle_unpinned_model_makes_room() -> None:
    models = [held("a", OLD - 5), held("b", OLD - 9, pinned=True), held("c", OLD - 7, busy=True), held("d", OLD - 1)]
    assert evictions_for(models, 100, Limits(max_loaded=4, model_bytes=0), NOW) == ["a"]
    assert evictions_for(models, 100, Limits(max_loaded=3, model_bytes=0), NOW) == ["a", "d"]
    assert evictions_for(models, 100, Limits(max_loaded=2, model_bytes=0), NOW) is None  # b pinned, c busy


def test_a_model_used_a_moment_ago_is_not_evicted() -> None:
    assert evictions_for([held("a", NOW - MIN_IDLE_S / 2)], 100, Limits(1, 0), NOW) is None


def test_bytes_decide_when_there_is_no_count_limit() -> None:
    models = [held("a", OLD - 2, size=300), held("b", OLD - 1, size=300)]
    assert evictions_for(models, 300, Limits(0, 1000), NOW) == []
    assert evictions_for(models, 500, Limits(0, 1000), NOW) == ["a"]
    assert evictions_for(models, 2000, Limits(0, 1000), NOW) is None


def test_a_cold_model_with_waiting_requests_evicts_but_a_preload_never_does() -> None:
    full = [held("a"), held("b")]
    limits = Limits(max_loaded=2, model_bytes=0)
    assert first(full, [wanted("x", backlog=3)], limits) == ("x", "demand", ["a"])
    assert first(full, [wanted("x")], limits) is None  # nobody asked: no eviction
    assert first(full, [wanted("x", backlog=3, holders=1)], limits) is None  # another worker serves it
    assert first([held("a")], [wanted("x"), wanted("y", holders=1)], limits) == ("x", "preload", [])


def test_pinned_first_then_demand_by_backlog_then_hot_copies_only_with_room() -> None:
    limits = Limits(max_loaded=3, model_bytes=0)
    models = [wanted("p", pinned=True), wanted("x", backlog=1), wanted("y", backlog=9), wanted("h", holders=1, hot=True)]
    order = [(name, why) for name, why, _ in load_choices([], models, limits, NOW)]
    assert order[:4] == [("p", "keep_loaded"), ("y", "demand"), ("x", "demand"), ("h", "hot")]
    assert first([held("a"), held("b"), held("c")], [wanted("h", holders=1, hot=True, backlog=50)], limits) is None


def test_a_model_larger_than_the_worker_may_hold_is_never_chosen() -> None:
    assert first([], [wanted("big", backlog=1, size=5000)], Limits(0, 1000)) is None


def test_models_over_the_limits_are_unloaded_least_recent_first() -> None:
    models = [held("a", OLD - 1, size=600), held("b", OLD - 3, size=600), held("c", OLD - 2, size=600, busy=True)]
    assert over_budget(models, Limits(0, 1300), NOW) == ["b"]
    assert over_budget(models, Limits(0, 1000), NOW) == ["b", "a"]  # c is busy: it stays
    assert over_budget(models, Limits(2, 0), NOW) == ["b"]
    assert over_budget(models, Limits(0, 0), NOW) == []


def test_a_backlog_over_two_full_batches_for_a_second_makes_a_model_hot(monkeypatch: Any) -> None:
    from types import SimpleNamespace

    from models_registry.core.batch_types import BatchPolicy
    from models_registry.worker import placer as placer_module

    task = SimpleNamespace(policy=BatchPolicy(max_batch_size=8))
    slots = SimpleNamespace(specs={"m": SimpleNamespace(tasks={"t": task})})
    placer = placer_module.Placer(layer=None, slots=slots, worker_id="w")  # type: ignore[arg-type]
    clock = [100.0]
    monkeypatch.setattr(placer_module.time, "time", lambda: clock[0])
    assert placer._hot({"m": 16}) == set()  # over the threshold from now on
    clock[0] += placer_module.HOT_AFTER_S
    assert placer._hot({"m": 16}) == {"m"}
    assert placer._hot({"m": 15}) == set()  # under it: the clock starts again
    clock[0] += 10
    assert placer._hot({"m": 40}) == set()
