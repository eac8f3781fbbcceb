"""catalog.served_check: whether the version a waiting request was handed to is still served, from a value."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from models_registry.catalog import lookups
from models_registry.catalog.rollout import Rollout
from models_registry.catalog.served_check import ServedVersion, still_served


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The workers' view and the registry still_served reads, as the test sets them."""
    found: dict[str, Any] = {"states": {}, "workers": ["w1"], "rollouts": {}}

    async def get_workers() -> Any:
        return SimpleNamespace(model_states=found["states"], workers=found["workers"])

    async def get_specs() -> dict[str, Any]:
        return {name: SimpleNamespace(rollout=rollout) for name, rollout in found["rollouts"].items()}

    monkeypatch.setattr(lookups, "get_workers", get_workers)
    monkeypatch.setattr(lookups, "get_specs", get_specs)
    return found


async def test_a_ready_wire_name_is_served_and_a_model_without_versions_only_then(registry: dict[str, Any]) -> None:
    registry["states"] = {"emb": {"state": "ready"}}
    assert await still_served(ServedVersion("emb", "emb"))
    registry["states"] = {"emb": {"state": "loading"}}
    assert not await still_served(ServedVersion("emb", "emb"))


async def test_a_version_the_registry_still_holds_is_waited_for_while_it_reloads(registry: dict[str, Any]) -> None:
    registry["states"] = {"emb.v2": {"state": "loading"}}
    registry["rollouts"] = {"emb": Rollout(live=2)}
    assert await still_served(ServedVersion("emb", "emb.v2", 2))
    registry["rollouts"] = {"emb": Rollout(live=3)}  # retired: nobody loads it again
    assert not await still_served(ServedVersion("emb", "emb.v2", 2))


@pytest.mark.parametrize("state, workers", [({"state": "error"}, ["w1"]), (None, [])])
async def test_a_version_that_failed_to_load_or_has_no_worker_is_not_served(
        registry: dict[str, Any], state: dict[str, str] | None, workers: list[str]) -> None:
    registry["states"] = {"emb.v2": state} if state else {}
    registry["workers"] = workers
    registry["rollouts"] = {"emb": Rollout(live=2)}
    assert not await still_served(ServedVersion("emb", "emb.v2", 2))
