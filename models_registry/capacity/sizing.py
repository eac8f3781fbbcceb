"""How many inference workers, and torch threads each, a machine gets by default (pure but for the two probes)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

# One single-threaded worker per core serves more than one worker with a thread per core
# (compare `python -m bench --quick --workers 2 --torch-threads 1` with `--workers 1`), and
# one sentence alone is faster on one thread: threads of one worker wait for each other at
# every operation, and a web or Redis process taking a core stalls them all; separate
# processes do not. Capped because every worker holds its own copy of every model.
MAX_AUTO_WORKERS = 4
# Web processes share one port (uvicorn --workers). One per two cores: the workers take a
# core each, and on 2 cores one web process served the tiny model at 1.11x two's rate at 16
# clients and 1.15x at 64 (docs/bench/tiny-2core-webs.md: `python -m bench.tiny --webs 2
# --baseline HEAD --baseline-webs 1`); capped because each holds its own Django and connections.
MAX_AUTO_WEBS = 8
# An accelerator's workers (accelerator_workers): one per CORES_PER_ACCELERATOR_WORKER host
# cores, at least two; each needs ACCELERATOR_WORKER_BYTES of device memory (a CUDA context,
# about 0.5 GiB, plus an encoder's weights and its batches' activations).
CORES_PER_ACCELERATOR_WORKER = 4
MIN_ACCELERATOR_WORKERS = 2
MAX_ACCELERATOR_WORKERS = 8
ACCELERATOR_WORKER_BYTES = 2 << 30


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
                   workers: int = 0, device_bytes: int = 0) -> WorkerLayout:
    """On CPU: one worker per core up to max_workers, the cores shared out as threads.

    On an accelerator: accelerator_workers() processes sharing the device (device_bytes:
    its memory, 0 when unknown). An explicit number of workers (> 0) keeps the rule for
    threads: the cores shared out.
    """
    cores = max(1, cores)
    if workers > 0:
        return WorkerLayout(workers=workers, threads=max(1, cores // workers))
    if device != "cpu":
        workers = accelerator_workers(cores, device_bytes)
        return WorkerLayout(workers=workers, threads=max(1, min(cores // workers, 4)))
    workers = min(cores, max(1, max_workers))
    return WorkerLayout(workers=workers, threads=max(1, cores // workers))


def accelerator_workers(cores: int, device_bytes: int = 0) -> int:
    """Worker processes sharing one accelerator: a core's worth of host work each, as many as its memory holds.

    Issue 26 (one H200, 16 host cores, a MiniLM-shaped encoder): one worker served 3,774
    single sentences a second, two 6,802, four 8,941, with the GPU 6-10%, 26-50% and 46-57%
    busy: a worker's host work (tokenizing, packing, replies) saturates one core while
    the device waits, so one worker gave 42% of four. Each worker is its own process with
    its own CUDA context, so their host work runs in parallel on the one device. A quarter
    of the cores leaves the rest to the web processes, Redis and the clients; at least
    MIN_ACCELERATOR_WORKERS, and no more than the device's memory holds.
    """
    wanted = max(MIN_ACCELERATOR_WORKERS, max(1, cores) // CORES_PER_ACCELERATOR_WORKER)
    if device_bytes > 0:
        wanted = min(wanted, max(1, device_bytes // ACCELERATOR_WORKER_BYTES))
    return min(wanted, MAX_ACCELERATOR_WORKERS)


def accelerator_memory_bytes(device: str) -> int:
    """The memory of the CUDA device named by device (nvidia-smi); 0 when unknown or not CUDA.

    Asked of nvidia-smi, not torch: the process that starts the workers must not create a
    CUDA context of its own on the device they share.
    """
    if not device.startswith("cuda") or shutil.which("nvidia-smi") is None:
        return 0
    index = device.partition(":")[2] or "0"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", index],
                             capture_output=True, text=True, timeout=10, check=True).stdout
        return int(float(out.split()[0])) << 20  # MiB
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return 0


def web_processes(cores: int, setting: int = 0) -> int:
    """Web server processes: the setting when > 0, else one per two cores (at least one) up to MAX_AUTO_WEBS."""
    if setting > 0:
        return setting
    return max(1, min(cores // 2, MAX_AUTO_WEBS))
