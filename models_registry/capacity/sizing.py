"""How many inference workers, and torch threads each, a machine gets by default (pure)."""

from __future__ import annotations

import os
from dataclasses import dataclass

# One single-threaded worker per core serves more than one worker with a thread per core
# (compare `python -m bench --quick --workers 2 --torch-threads 1` with `--workers 1`), and
# one sentence alone is faster on one thread: threads of one worker wait for each other at
# every operation, and a web or Redis process taking a core stalls them all; separate
# processes do not. Capped because every worker holds its own copy of every model.
MAX_AUTO_WORKERS = 4
# Web processes share one port (uvicorn --workers). One per core: on 2 cores two web processes
# served the tiny model at 1.1-1.8x one's rate (`python -m bench.tiny --webs 2`), because a
# single one saturates first; capped because each holds its own Django and connections.
MAX_AUTO_WEBS = 8


@dataclass(frozen=True)
class WorkerLayout:
    """Worker processes and torch threads per worker."""

    workers: int
    threads: int


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, not the whole machine)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def default_layout(cores: int, device: str = "cpu", max_workers: int = MAX_AUTO_WORKERS,
                   workers: int = 0) -> WorkerLayout:
    """On CPU: one worker per core up to max_workers, the cores shared out as threads.

    On an accelerator, one worker: it feeds the device, more would only split its batches.
    An explicit number of workers (> 0) keeps the rule for threads: the cores shared out.
    """
    cores = max(1, cores)
    if workers > 0:
        return WorkerLayout(workers=workers, threads=max(1, cores // workers))
    if device != "cpu":
        return WorkerLayout(workers=1, threads=min(cores, 4))
    workers = min(cores, max(1, max_workers))
    return WorkerLayout(workers=workers, threads=max(1, cores // workers))


def web_processes(cores: int, setting: int = 0) -> int:
    """Web server processes: the setting when > 0, else one per core up to MAX_AUTO_WEBS."""
    if setting > 0:
        return setting
    return max(1, min(cores, MAX_AUTO_WEBS))
