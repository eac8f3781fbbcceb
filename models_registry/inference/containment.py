"""Which exceptions a worker may answer as a failed request instead of dying of them.

The tokenizers library raises `pyo3_runtime.PanicException` (a BaseException) for
inputs it cannot window, so `except Exception` lets a request end the worker. Everything
is contained except what must stop the process or its task.
"""

from __future__ import annotations

import asyncio

# What must propagate: Ctrl-C, sys.exit, a generator's close and a cancelled asyncio task.
MUST_PROPAGATE = (KeyboardInterrupt, SystemExit, GeneratorExit, asyncio.CancelledError)


def contained(error: BaseException) -> bool:
    """Whether error may be answered as a failed request (everything but the process's own stop signals)."""
    return not isinstance(error, MUST_PROPAGATE)


def describe(error: BaseException, limit: int = 300) -> str:
    """A short one-line description of error for a client's 500 (a Rust panic's text is long)."""
    first_line = (str(error).strip().splitlines() or [""])[0]
    text = f"{type(error).__name__}: {first_line}" if first_line else type(error).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"
