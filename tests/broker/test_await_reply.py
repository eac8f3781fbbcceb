"""A view waiting for its reply: a missing admission entry means lost only if the answer does not follow."""

from __future__ import annotations

import asyncio
import time

import pytest

from models_registry.broker import handoff
from models_registry.core.errors import Unavailable


async def _never_queued() -> bool:
    return False


async def test_an_answer_on_its_way_when_the_entry_went_is_still_delivered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker removes the entry with its answer; the reply pump may deliver it a moment later."""
    monkeypatch.setattr(handoff, "SERVED_CHECK_EVERY_S", 0.05)
    receiver: asyncio.Future[dict[str, object]] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_later(0.07, receiver.set_result, {"outputs": [1]})
    reply = await handoff._await_reply(receiver, time.time() + 10, 10, "m", None, _never_queued)
    assert reply == {"outputs": [1]}


async def test_no_entry_and_no_answer_is_a_lost_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handoff, "SERVED_CHECK_EVERY_S", 0.05)
    receiver: asyncio.Future[dict[str, object]] = asyncio.get_running_loop().create_future()
    started = time.monotonic()
    with pytest.raises(Unavailable, match="lost this request"):
        await handoff._await_reply(receiver, time.time() + 10, 10, "m", None, _never_queued)
    assert time.monotonic() - started < 1.0
