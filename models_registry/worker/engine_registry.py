"""The one engine of this worker process, so the consumer can reach it."""

from __future__ import annotations

from typing import Any

_engine: Any = None


def install(engine: Any) -> None:
    """Make engine the current one (called by the worker at start)."""
    global _engine
    _engine = engine


def current() -> Any:
    """The running engine, or None outside a worker."""
    return _engine
