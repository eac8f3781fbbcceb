"""worker.adapter_waits: which requests wait for a refresh to list their adapter, and when they are looked at (pure)."""

from __future__ import annotations

from models_registry.core.model_state import ModelState
from models_registry.worker.adapter_waits import WAIT_REFRESHES, AdapterWaits, waits_for_listing
from models_registry.worker.model_slots import ModelSlot
from tests.unit.test_adapter_intake import base, request


def test_only_an_unlisted_adapter_of_a_ready_base_waits_and_only_for_a_few_refreshes() -> None:
    ready = ModelSlot(spec=base("alpha"), state=ModelState.READY)
    assert waits_for_listing(request("beta"), ready, since=4, refreshes=4)
    assert waits_for_listing(request("beta"), ready, since=4, refreshes=4 + WAIT_REFRESHES - 1)
    assert not waits_for_listing(request("beta"), ready, since=4, refreshes=4 + WAIT_REFRESHES)  # then its 503
    assert not waits_for_listing(request("alpha"), ready, since=4, refreshes=4)  # listed: queued
    assert not waits_for_listing(request(""), ready, since=4, refreshes=4)  # the base
    loading = ModelSlot(spec=base(), state=ModelState.LOADING)
    assert not waits_for_listing(request("beta"), loading, since=4, refreshes=4)  # not pulled for a loading base
    assert not waits_for_listing(request("beta"), None, since=4, refreshes=4)


def test_a_held_request_is_looked_at_again_once_per_refresh_in_arrival_order() -> None:
    waits = AdapterWaits()
    waits.hold(request("a"), ("c", b"1"), since=2, refreshes=2)
    waits.hold(request("b"), ("c", b"2"), since=2, refreshes=3)
    assert waits.due(2) == []  # no refresh since: nothing to look at
    assert [w.request.adapter for w in waits.due(3)] == ["a"] and len(waits) == 1  # the second came after refresh 3
    assert [w.request.adapter for w in waits.due(4)] == ["b"] and len(waits) == 0
