"""The job driver's line slots: round-robin between owners, and a rate-limited owner's pause."""

from __future__ import annotations

import asyncio

import pytest

from models_registry.jobs.fair_share import FairShare


async def _take(share: FairShare, owner: str, order: list[str], hold_s: float = 0.01) -> None:
    async with share.slot(owner):
        order.append(owner)
        await asyncio.sleep(hold_s)


async def test_free_slots_go_round_robin_not_oldest_first() -> None:
    share, order = FairShare(1), []
    # Owner a queues 6 lines before b and c queue theirs.
    tasks = [asyncio.ensure_future(_take(share, "a", order)) for _ in range(6)]
    await asyncio.sleep(0)
    tasks += [asyncio.ensure_future(_take(share, o, order)) for o in ("b", "b", "c")]
    await asyncio.gather(*tasks)
    # a's first line held the slot; then every owner in turn, a's backlog last.
    assert order == ["a", "a", "b", "c", "a", "b", "a", "a", "a"]
    assert share.used == 0 and share.held == {}


async def test_a_throttled_owner_waits_without_holding_slots_then_starts_one_at_a_time() -> None:
    share, order = FairShare(4), []
    share.throttle("a", 0.2)
    started = asyncio.get_running_loop().time()
    limited = [asyncio.ensure_future(_take(share, "a", order, 0.05)) for _ in range(3)]
    others = [asyncio.ensure_future(_take(share, "b", order, 0.01)) for _ in range(8)]
    await asyncio.gather(*others)
    assert "a" not in order and asyncio.get_running_loop().time() - started < 0.15
    await asyncio.sleep(0.21)
    assert share.held.get("a") == 1  # slow start: one line after the pause
    share.succeeded("a")
    await asyncio.gather(*limited)
    assert order.count("a") == 3


async def test_a_cancelled_waiter_gives_its_turn_on() -> None:
    share, order = FairShare(1), []
    holder = asyncio.ensure_future(_take(share, "a", order, 0.05))
    await asyncio.sleep(0)
    waiter = asyncio.ensure_future(_take(share, "b", order))
    after = asyncio.ensure_future(_take(share, "c", order))
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.gather(holder, after, waiter, return_exceptions=True)
    assert order == ["a", "c"] and share.used == 0


def test_a_share_needs_a_slot() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        FairShare(0)
