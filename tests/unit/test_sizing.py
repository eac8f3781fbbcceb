"""Default worker layout: one single-threaded worker per core on CPU (capped), one worker on an accelerator."""

from __future__ import annotations

from models_registry.capacity.sizing import MAX_AUTO_WEBS, WorkerLayout, available_cores, default_layout, web_processes


def test_small_cpu_machines_get_one_single_threaded_worker_per_core() -> None:
    assert default_layout(1) == WorkerLayout(workers=1, threads=1)
    assert default_layout(2) == WorkerLayout(workers=2, threads=1)
    assert default_layout(4) == WorkerLayout(workers=4, threads=1)


def test_big_cpu_machines_share_cores_out_as_threads_under_the_cap() -> None:
    assert default_layout(16) == WorkerLayout(workers=4, threads=4)
    assert default_layout(6) == WorkerLayout(workers=4, threads=1)
    assert default_layout(16, max_workers=2) == WorkerLayout(workers=2, threads=8)


def test_an_accelerator_gets_one_worker() -> None:
    assert default_layout(16, device="cuda").workers == 1
    assert default_layout(0) == WorkerLayout(workers=1, threads=1)


def test_available_cores_is_positive() -> None:
    assert available_cores() >= 1


def test_an_explicit_worker_count_shares_the_cores_out() -> None:
    assert default_layout(8, workers=2) == WorkerLayout(workers=2, threads=4)
    assert default_layout(2, workers=4) == WorkerLayout(workers=4, threads=1)
    assert default_layout(16, device="cuda", workers=2) == WorkerLayout(workers=2, threads=8)


def test_web_processes_are_one_per_core_capped_unless_set() -> None:
    assert web_processes(1) == 1
    assert web_processes(2) == 2
    assert web_processes(64) == MAX_AUTO_WEBS
    assert web_processes(64, setting=3) == 3
