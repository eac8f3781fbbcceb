"""broker.enqueue's script in tests: places taken as the hand-off takes them, and every run of it recorded."""

from __future__ import annotations

from typing import Any

import pytest

from models_registry.broker import admission, enqueue


async def admit(layer: Any, model: str, task: str, request_id: str, count: int, deadline: float,
                limit: int) -> tuple[bool, int]:
    """Reserve count places of model/task for request_id (nothing sent, nothing charged): (admitted, depth before)."""
    places = admission.places(layer, model, task, request_id, count, deadline, limit)
    status, depth = await enqueue.run(layer.connection(0), None, places)
    return status == enqueue.DONE, depth


def record_runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, bool, bool]]:
    """Every run of the enqueue script from now on, as (charged, admitted, sent)."""
    seen: list[tuple[bool, bool, bool]] = []
    original = enqueue.run

    async def run(conn: Any, plan: Any, places: Any = None, send: Any = None) -> tuple[int, int]:
        seen.append((plan is not None, places is not None, send is not None))
        return await original(conn, plan, places, send)

    monkeypatch.setattr(enqueue, "run", run)
    return seen
