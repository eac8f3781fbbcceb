"""Places in a task's queue taken as the hand-off takes them: broker.enqueue's script, its admission part alone."""

from __future__ import annotations

import time
from typing import Any

from models_registry.broker import admission, enqueue


async def admit(layer: Any, model: str, task: str, request_id: str, count: int, deadline: float,
                limit: int) -> tuple[bool, int]:
    """Reserve count places of model/task for request_id (nothing sent, nothing charged): (admitted, depth before)."""
    places = enqueue.Admission(admission.pending_key(layer, model, task), admission.members(request_id, count),
                               deadline, limit, time.time())
    status, depth = await enqueue.run(layer.connection(0), None, places)
    return status == enqueue.DONE, depth
