"""Default worker layout: one single-threaded worker per core on CPU (capped), one per four cores on an accelerator."""

from __future__ import annotations

from models_registry.capacity.sizing import (
    ACCELERATOR_WORKER_BYTES,
    MAX_ACCELERATOR_WORKERS,
    MAX_AUTO_WEBS,
    WorkerLayout,
    accelerator_workers,
    available_cores,
    default_layout,
    web_processes,
)


def test_small_cpu_machines_get_one_single_threaded_worker_per_core() -> None:
    assert default_layout(1) == WorkerLayout(workers=1, threads=1)
    assert default_layout(2) == WorkerLayout(workers=2, threads=1)
    assert default_layout(4) == WorkerLayout(workers=4, threads=1)


def test_big_cpu_machines_share_cores_out_as_threads_under_the_cap() -> None:
    assert default_layout(16) == WorkerLayout(workers=4, threads=4)
    assert default_layout(6) == WorkerLayout(workers=4, threads=1)
    assert default_layout(16, max_workers=2) == WorkerLayout(workers=2, threads=8)


def test_an_accelerator_gets_a_worker_per_four_cores_and_at_least_two() -> None:
    # Issue 26: on 16 cores one worker gave 42% of four workers' throughput.
    assert default_layout(16, device="cuda") == WorkerLayout(workers=4, threads=4)
    assert default_layout(2, device="cuda") == WorkerLayout(workers=2, threads=1)
    assert default_layout(8, device="cuda") == WorkerLayout(workers=2, threads=4)
    assert default_layout(128, device="cuda").workers == MAX_ACCELERATOR_WORKERS
    assert default_layout(0) == WorkerLayout(workers=1, threads=1)


def test_an_accelerator_gets_no_more_workers_than_its_memory_holds() -> None:
    assert accelerator_workers(16, device_bytes=80 << 30) == 4
    assert accelerator_workers(16, device_bytes=3 * ACCELERATOR_WORKER_BYTES) == 3
    assert accelerator_workers(16, device_bytes=ACCELERATOR_WORKER_BYTES // 2) == 1
    assert accelerator_workers(16, device_bytes=0) == 4  # unknown memory: cores decide
    assert default_layout(16, device="cuda", device_bytes=4 << 30).workers == 2


def test_available_cores_is_positive() -> None:
    assert available_cores() >= 1


def test_an_explicit_worker_count_shares_the_cores_out() -> None:
    assert default_layout(8, workers=2) == WorkerLayout(workers=2, threads=4)
    assert default_layout(2, workers=4) == WorkerLayout(workers=4, threads=1)
    assert default_layout(16, device="cuda", workers=2) == WorkerLayout(workers=2, threads=8)


def test_web_processes_are_one_per_two_cores_capped_unless_set() -> None:
    assert web_processes(1) == 1
    assert web_processes(2) == 1
    assert web_processes(4) == 2
    assert web_processes(64) == MAX_AUTO_WEBS
    assert web_processes(64, setting=3) == 3


def test_accelerator_memory_is_unknown_off_cuda() -> None:
    from models_registry.capacity.sizing import accelerator_memory_bytes

    assert accelerator_memory_bytes("cpu") == 0
    assert accelerator_memory_bytes("mps") == 0
