"""Batches sized by memory: the batcher asks the limit, and an out-of-memory batch is split, never failed whole."""

from __future__ import annotations

import threading
from typing import Any

from models_registry.capacity.batch_memory import BatchMemory
from models_registry.capacity.memory_fit import MemoryFit
from models_registry.core.batch_types import BatchPolicy, ItemFailure
from models_registry.core.errors import TooLarge
from models_registry.inference import compute_deadline
from models_registry.worker.batcher import Batcher

KEY = ("m", "t")


def queue(batcher: Batcher, costs: list[int]) -> None:
    for n, cost in enumerate(costs):
        batcher.submit(KEY, f"r{n}", [f"x{n}"], [cost], now=0.0, deadline=100.0, delivery=None)


def test_memory_limit_closes_and_caps_batches() -> None:
    # At most 256 padded tokens per batch, whatever the size limit says.
    batcher = Batcher(memory_limit=lambda key, items, longest: items * longest <= 256)
    batcher.set_policy(KEY, BatchPolicy(max_batch_size=32, max_batch_delay_s=10.0))
    queue(batcher, [64] * 10)
    assert batcher.due_reason(KEY, 0.0, idle=False) == "memory"  # closed at once, not after the delay
    sizes = []
    while (batch := batcher.next_batch(1.0)) is not None:  # idle: the remainder goes too
        sizes.append(len(batch))
        assert batch.padded_tokens <= 256
    assert sizes == [4, 4, 2]


def test_one_input_over_the_limit_still_runs_alone() -> None:
    batcher = Batcher(memory_limit=lambda key, items, longest: items * longest <= 100)
    batcher.set_policy(KEY, BatchPolicy(max_batch_size=8))
    queue(batcher, [500, 10])
    first = batcher.next_batch(0.0)
    assert first is not None and [i.cost for i in first.items] == [500]


def test_no_limit_keeps_size_batches() -> None:
    batcher = Batcher()
    batcher.set_policy(KEY, BatchPolicy(max_batch_size=8))
    queue(batcher, [64] * 10)
    batch = batcher.next_batch(0.0)
    assert batch is not None and len(batch) == 8


class Allocator:
    """Fails like an exhausted allocator for batches over a padded-token limit; records what ran."""

    def __init__(self, costs: list[int], limit: int) -> None:
        self.costs, self.limit, self.runs = costs, limit, []

    def __call__(self, positions: list[int]) -> list[Any]:
        padded = len(positions) * max(self.costs[p] for p in positions)
        if padded > self.limit:
            raise MemoryError("no room")
        self.runs.append(list(positions))
        return [f"out{p}" for p in positions]


def test_out_of_memory_splits_in_halves_lowers_the_cap_and_answers_413_only_alone() -> None:
    memory = BatchMemory(budget_bytes=1 << 40)
    costs = [10, 10, 10, 10, 20, 20, 30, 600]
    allocator = Allocator(costs, limit=40)
    outputs = memory.run(KEY, costs, allocator)
    assert outputs[:7] == [f"out{p}" for p in range(7)]
    assert isinstance(outputs[7], ItemFailure) and isinstance(outputs[7].error, TooLarge)
    assert "needs more memory" in str(outputs[7].error)
    assert all(len(run) * max(costs[p] for p in run) <= 40 for run in allocator.runs)
    assert memory.ooms >= 3
    assert not memory.allows(KEY, 8, 100) and memory.allows(KEY, 2, 100)  # the ceiling keeps big batches out
    assert memory.report(KEY)["oom_ceiling_tokens"] is not None


def test_other_errors_are_not_taken_for_memory() -> None:
    memory = BatchMemory(budget_bytes=1 << 40)

    def broken(positions: list[int]) -> list[Any]:
        raise ValueError("a bug")

    try:
        memory.run(KEY, [1, 2], broken)
    except ValueError:
        pass
    else:
        raise AssertionError("a non-memory error must reach the caller")
    assert memory.ooms == 0


def test_measured_batches_train_the_fit_from_the_second_run_of_a_shape() -> None:
    memory = BatchMemory(budget_bytes=1 << 40)
    for items in (1, 2, 4, 8, 16):
        for _ in range(2):  # a shape's first run builds its caches: only the second is measured
            memory.run(KEY, [16] * items, lambda at: [bytearray(200_000 * len(at)) and p for p in at])
    report = memory.report(KEY)
    assert report["samples"] == 4 and report["coefficients"] is not None  # the first measured one is discarded
    assert [(b["items"], b["longest"]) for b in report["recent_batches"]] == [(1, 16), (2, 16), (4, 16), (8, 16),
                                                                                 (16, 16)]


def test_a_measured_batch_runs_in_the_probes_own_thread_under_the_batch_deadline() -> None:
    # The caller's allocator arena holds what unmeasured batches freed: a batch measured there peaks by that history.
    memory = BatchMemory(budget_bytes=1 << 40)
    ran: list[tuple[str, bool]] = []

    def compute(positions: list[int]) -> list[Any]:
        ran.append((threading.current_thread().name, compute_deadline.passed()))
        return [None] * len(positions)

    with compute_deadline.computing_until(0.0):  # long past
        for _ in range(2):  # the shape's first run is not measured, the second is
            memory.run(KEY, [16, 16], compute)
    here = threading.current_thread().name
    assert ran[0] == (here, True)
    assert ran[1][0] != here and ran[1][0].startswith("measured") and ran[1][1] is True
    assert memory.report(KEY)["last_batch"] is not None


def test_warm_up_runs_one_shape_per_step_and_a_fresh_copy_inherits_the_fit() -> None:
    """Each step is one shape (the live models' batches run between steps); a copy skips them all."""
    memory = BatchMemory(10 * 2**30, enabled=True)
    runs: list[tuple[int, int]] = []
    steps = memory.warm_up_steps(("m.v1", "t"), 64, lambda items, tokens: runs.append((items, tokens)))
    assert len(steps) == 9 and not runs
    assert steps[0]() and runs == [(2, 32), (2, 32)]  # twice: the first run of a shape is not measured
    fit = memory.fits.setdefault(("m.v1", "t"), MemoryFit())
    fit.coef = (1.0, 2.0, 3.0)
    assert memory.inherit(("m.v2", "t"), ("m.v1", "t"))
    assert memory.fits[("m.v2", "t")].coef == fit.coef and memory.fits[("m.v2", "t")] is not fit
    assert memory.warm_up_steps(("m.v2", "t"), 64, lambda items, tokens: runs.append((items, tokens))) == []
    assert not memory.inherit(("m.v3", "t"), ("other", "t"))  # nothing trained to inherit
