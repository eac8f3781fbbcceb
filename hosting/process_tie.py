"""Children that end with their parent (Linux: a parent-death signal)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_this_process() -> Callable[[], None] | None:
    """A Popen preexec_fn: the child gets SIGTERM when this process dies (even by SIGKILL); None off Linux.

    The signal follows the thread that started the child: call this from the main thread.
    """
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)  # loaded here: nothing is loaded between fork and exec
    parent = os.getpid()

    def arm() -> None:
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0 or os.getppid() != parent:
            os._exit(1)  # the signal could not be armed, or the parent is already gone

    return arm

