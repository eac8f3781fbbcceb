"""The deadline of the batch computing now, so long computations stop once nobody waits for them.

The batch loop sets it (the latest deadline of the batch's requests) around each run on
the compute thread; generation stops at its next token once it has passed, and runs with
several parts (parameter groups, question-answering window chunks) skip what is left.
Every client of the batch has had its 504 by then: the work would be thrown away.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from models_registry.core.errors import Timeout

logger = logging.getLogger(__name__)
_local = threading.local()
T = TypeVar("T")


@contextmanager
def computing_until(deadline: float | None) -> Iterator[None]:
    """Run the block with deadline as the batch's deadline on this thread (None: none)."""
    previous = getattr(_local, "deadline", None)
    _local.deadline = deadline
    try:
        yield
    finally:
        _local.deadline = previous


def carried(work: Callable[[], T]) -> Callable[[], T]:
    """work, to be run on another thread under this thread's deadline (a measured batch runs in the probe's thread)."""
    deadline = getattr(_local, "deadline", None)

    def run() -> T:
        with computing_until(deadline):
            return work()

    return run


def passed() -> bool:
    """Whether every request of the batch computing on this thread is past its deadline."""
    deadline = getattr(_local, "deadline", None)
    return deadline is not None and time.time() > deadline


def check() -> None:
    """Raise Timeout when the batch's deadline has passed (between parts of a long computation)."""
    if passed():
        log_stop()
        raise Timeout("stopped: every request of this batch was past its deadline")


def log_stop() -> None:
    """Say in the worker's log that a batch's remaining compute was dropped at its deadline."""
    logger.info("dropped the rest of a batch: every request of it was past its deadline")


class StopAtDeadline:
    """A generate() stopping criterion: every sequence stops once the batch's deadline has passed."""

    def __init__(self) -> None:
        self.deadline = getattr(_local, "deadline", None)  # read on the compute thread, at construction

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        """True for every sequence when the deadline has passed (a bool tensor, as transformers wants)."""
        import torch

        stop = self.deadline is not None and time.time() > self.deadline
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)
