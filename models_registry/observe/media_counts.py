"""Media items and bytes accepted per task: the Prometheus counters and this web process' totals for the dashboard."""

from __future__ import annotations

import threading
from typing import Any

from models_registry.media.item import MediaItem
from models_registry.observe import metrics

_lock = threading.Lock()
_totals: dict[tuple[str, str], dict[str, int]] = {}


def count(model: str, task: str, items: list[MediaItem]) -> None:
    """Count accepted files (hosting_media_items_total, hosting_media_bytes_total, the dashboard's totals)."""
    for item in items:
        metrics.MEDIA_ITEMS.labels(model, task, item.kind).inc()
        metrics.MEDIA_BYTES.labels(model, task, item.kind).inc(len(item.data))
        with _lock:
            totals = _totals.setdefault((model, task), {"items": 0, "bytes": 0})
            totals["items"] += 1
            totals["bytes"] += len(item.data)


def totals(model: str, task: str) -> dict[str, Any] | None:
    """{"items", "bytes"} this web process accepted for the task since it started; None when none."""
    with _lock:
        found = _totals.get((model, task))
        return dict(found) if found else None
