"""Setting up the product's stack for a bench run: a set-up that fails prints the processes' logs and stops it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def stopped_on_failure(stack: Any) -> Iterator[Any]:
    """Yield stack; when the set-up inside raises, print its process logs to stderr, stop it and re-raise."""
    try:
        yield stack
    except BaseException:
        print(stack.logs(), file=sys.stderr)
        stack.stop()
        raise
