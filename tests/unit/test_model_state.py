"""ModelState, the best state across workers, and TaskKey."""

from __future__ import annotations

from models_registry.core.model_state import NO_WORKER_YET, ModelState, best_report, servable, shown_state
from models_registry.core.task_key import TaskKey


def test_ready_beats_loading_beats_error_whatever_the_order() -> None:
    error, loading, ready = {"state": "error", "error": "boom"}, {"state": "loading"}, {"state": "ready"}
    assert best_report([error, loading, ready]) is ready
    assert best_report([ready, error]) is ready
    assert best_report([error, None, loading]) is loading
    assert best_report([error]) is error


def test_the_first_report_wins_a_tie_and_no_report_gives_none() -> None:
    first, second = {"state": "error", "error": "first"}, {"state": "error", "error": "second"}
    assert best_report([first, second]) is first
    assert best_report([]) is None
    assert best_report([None, {}]) is None


def test_shown_state_for_disabled_unloaded_and_reported_models() -> None:
    assert shown_state(False, {"state": "ready"}) == (ModelState.DISABLED, "")
    assert shown_state(True, None) == (ModelState.LOADING, NO_WORKER_YET)
    assert shown_state(True, {"state": "error", "error": "bad weights"}) == ("error", "bad weights")


def test_states_serialise_as_their_plain_names() -> None:
    assert [str(s) for s in ModelState] == ["loading", "ready", "available", "error", "disabled"]
    assert ModelState.READY == "ready"


def test_task_key_is_a_tuple_and_prints_as_model_slash_task() -> None:
    key = TaskKey("minilm", "embed")
    assert key == ("minilm", "embed")
    assert {("minilm", "embed"): 1}[key] == 1
    assert str(key) == f"{key}" == "minilm/embed"
    assert TaskKey.parse("minilm/embed") == key
    assert TaskKey.parse("minilm") == ("minilm", "")


def test_loadable_on_demand_ranks_under_loading_and_over_error_and_is_served() -> None:
    available, loading, error = {"state": "available"}, {"state": "loading"}, {"state": "error", "error": "x"}
    assert best_report([error, available]) is available
    assert best_report([available, loading]) is loading
    assert servable(available) and servable({"state": "ready"})
    assert not servable(loading) and servable({"state": "loading", "on_demand": True})
    assert not servable(error) and not servable(None)
