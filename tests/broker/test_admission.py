"""Admission against a real Redis (broker.enqueue's admission part): places per task across every web process,
freed on leave or expiry."""

from __future__ import annotations

import asyncio
import time

from models_registry.broker import admission
from models_registry.broker.layer import HostingChannelLayer
from tests.admitting import admit

LATER = 60.0


async def test_requests_are_admitted_until_the_limit_and_refused_whole_past_it(layer: HostingChannelLayer) -> None:
    deadline = time.time() + LATER
    assert await admit(layer, "m", "t", "a", 3, deadline, limit=4) == (True, 0)
    assert await admit(layer, "m", "t", "b", 2, deadline, limit=4) == (False, 3)  # 3 + 2 > 4: none taken
    assert await admit(layer, "m", "t", "c", 1, deadline, limit=4) == (True, 3)
    assert await admission.depth(layer, "m", "t") == 4
    assert await admit(layer, "m", "other", "d", 4, deadline, limit=4) == (True, 0)  # tasks apart


async def test_leaving_gives_the_places_back(layer: HostingChannelLayer) -> None:
    deadline = time.time() + LATER
    await admit(layer, "m", "t", "a", 2, deadline, limit=2)
    assert (await admit(layer, "m", "t", "b", 1, deadline, limit=2))[0] is False
    await admission.leave(layer, "m", "t", "a", 2)
    assert await admit(layer, "m", "t", "b", 1, deadline, limit=2) == (True, 0)


async def test_requests_past_their_deadline_hold_no_place(layer: HostingChannelLayer) -> None:
    await admit(layer, "m", "t", "soon", 2, time.time() + 0.1, limit=2)
    await asyncio.sleep(0.15)
    assert await admission.depth(layer, "m", "t") == 0
    assert await admit(layer, "m", "t", "b", 2, time.time() + LATER, limit=2) == (True, 0)


async def test_still_wanted_names_the_requests_whose_client_waits(layer: HostingChannelLayer) -> None:
    deadline = time.time() + LATER
    for request_id in ("a", "b", "c"):
        await admit(layer, "m", "t", request_id, 2, deadline, limit=100)
    await admission.leave(layer, "m", "t", "b", 2)
    assert await admission.still_wanted(layer, "m", "t", ["a", "b", "c", "never"]) == {"a", "c"}
    assert await admission.still_wanted(layer, "m", "t", []) == set()
