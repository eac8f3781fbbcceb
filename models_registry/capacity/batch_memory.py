"""The worker's memory budget for batches: one fit per task, the cap the batcher asks, and out-of-memory recovery.

The batcher (pure) asks `allows(key, items, longest)` while it forms a batch; the batch
loop runs each batch through `run`, which measures the peak of some batches (every one
until the fit has samples, then new shapes and one in MEASURE_EVERY) and, when the
runtime runs out of memory, splits the batch in halves and retries, lowering the cap.
Only an input that cannot fit alone is answered 413.
"""

from __future__ import annotations

import copy
import functools
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from models_registry.capacity.memory_fit import MemoryFit
from models_registry.capacity.peak_memory import PeakProbe
from models_registry.core.batch_types import ItemFailure, Key
from models_registry.core.errors import TooLarge
from models_registry.inference.memory_errors import is_out_of_memory

logger = logging.getLogger(__name__)

HISTORY = 12  # measured batches per task shown with their predictions (API, admin)
SHAPE_BUCKET = 16  # input lengths within this many tokens count as one shape
MAX_SHAPES = 4096  # shapes remembered per task (then forgotten all at once)
TRAINING_SAMPLES = 16  # every batch of a task is measured until its fit has this many samples
MEASURE_EVERY = 16  # once the fit is trained, one batch in this many is measured (the cost is ~0.2 ms)
DEFAULT_LONGEST = 128  # the input length the reported cap assumes before a task has seen traffic


class BatchMemory:
    """Fits peak bytes per (model, task) on this worker's device and caps batches to the budget."""

    def __init__(self, budget_bytes: int, device: str = "cpu", enabled: bool = True) -> None:
        self.budget_bytes = budget_bytes
        self.enabled = enabled
        self.probe = PeakProbe(device)
        if enabled:
            self.probe.prepare()  # its thread, before models load: measured batches run there (PeakProbe)
        self.fits: dict[Key, MemoryFit] = {}
        self.resting_bytes = self.probe.resting() if enabled else 0  # models and runtime, between batches
        self.ooms = 0
        self.last: dict[Key, dict[str, float]] = {}  # the latest batch per key: shape, predicted and measured bytes
        self.history: dict[Key, deque[dict[str, float]]] = {}  # the latest HISTORY measured batches per key
        self._count = 0
        self._shapes: dict[MemoryFit, set[tuple[int, int]]] = {}  # (items, longest bucket) already run, per fit
        self.lock = threading.Lock()  # one measurement at a time: batches, warm-ups and loads

    # --- what the batcher asks ------------------------------------------------------------
    def available(self) -> float:
        """Bytes a batch may add to the resting process."""
        return max(0.0, self.budget_bytes - self.resting_bytes)

    def allows(self, key: Key, items: int, longest: int) -> bool:
        """Whether a batch of items padded to longest tokens fits the budget (the batcher's memory limit)."""
        fit = self.fits.get(key)
        return fit is None or fit.fits(items, longest, self.available())

    def forget(self, key: Key) -> None:
        """Drop a task's fit (its model was changed, not merely unloaded)."""
        self.fits.pop(key, None)
        self.last.pop(key, None)
        self.history.pop(key, None)

    # --- running a batch --------------------------------------------------------------------
    def run(self, key: Key, costs: Sequence[int], compute: Callable[[list[int]], list[Any]]) -> list[Any]:
        """compute(positions) for every position of the batch: measured sometimes, split on out-of-memory."""
        if not self.enabled:
            return compute(list(range(len(costs))))
        return self._attempt(key, costs, list(range(len(costs))), compute)

    def _attempt(self, key: Key, costs: Sequence[int], positions: list[int],
                 compute: Callable[[list[int]], list[Any]]) -> list[Any]:
        fit = self.fits.setdefault(key, MemoryFit())
        items, longest = len(positions), max(costs[p] for p in positions)
        measure = self._should_measure(fit, items, longest)
        with self.lock:
            if measure:
                self.probe.start()
            try:
                outputs = self.probe.run(lambda: compute(positions)) if measure else compute(positions)
            except Exception as error:
                if not is_out_of_memory(error):
                    raise
                outputs = None
                if measure:
                    self.probe.peak()  # ends the measurement (allocator settings back to serving)
                self.ooms += 1
                fit.lower_after_oom(items, longest)
                self.probe.release_cache()
                logger.warning("%s ran out of memory on %d item(s) of %d tokens (%s); %s", key, items, longest,
                               type(error).__name__, "splitting" if items > 1 else "answering 413")
            if outputs is not None and measure:
                peak = self.probe.peak()
                self.resting_bytes = self.probe.baseline
                predicted = fit.predict(items, longest)  # before this sample: a held-out prediction
                self.last[key] = {"items": items, "longest": longest, "measured_bytes": peak,
                                  "predicted_bytes": round(predicted or 0.0)}
                self.history.setdefault(key, deque(maxlen=HISTORY)).append(self.last[key])
                fit.add(items, longest, peak)
        if outputs is not None:
            return outputs
        if items == 1:
            return [ItemFailure(TooLarge(
                f"this input ({longest} tokens) needs more memory than the worker's budget leaves for a batch "
                f"({self.available() / 2**20:.0f} MiB of HOSTING_WORKER_MEMORY_BYTES); send a shorter input"))]
        half = items // 2  # positions are sorted by length: the short half and the long half
        return (self._attempt(key, costs, positions[:half], compute)
                + self._attempt(key, costs, positions[half:], compute))

    def _should_measure(self, fit: MemoryFit, items: int, longest: int) -> bool:
        self._count += 1
        # A shape's first run also builds its kernels and caches (10+ MiB more on MiniLM, kept
        # afterwards): measured, it would teach the fit that cost. Only shapes seen before are.
        seen = self._shapes.setdefault(fit, set())
        shape = (items, -(-longest // SHAPE_BUCKET))
        if shape not in seen:
            if len(seen) > MAX_SHAPES:
                seen.clear()
            seen.add(shape)
            return False
        if len(fit.samples) < TRAINING_SAMPLES or self._count % MEASURE_EVERY == 0:
            return True
        seen = fit.samples
        # A shape beyond every measured one is an extrapolation: check it.
        return (items * longest > max(s.items * s.longest for s in seen)
                or longest > max(s.longest for s in seen))

    def inherit(self, key: Key, source: Key) -> bool:
        """Start key's fit from source's trained one (a fresh copy of a model computes the same batches)."""
        fit = self.fits.get(source)
        if not self.enabled or fit is None or fit.coef is None or key in self.fits:
            return False
        self.fits[key] = copy.deepcopy(fit)
        return True

    def warm_up_steps(self, key: Key, max_tokens: int, run_shape: Callable[[int, int], Any]) -> list[Callable[[], bool]]:
        """Steps that measure a few shapes at load, smallest first, so the first burst is already capped.

        Each step (one shape) runs apart, so that batches of the models already serving run
        between them; a step answers False when warming up stops (a shape failed).
        run_shape(items, tokens) runs one batch of that shape through `run`. A shape the
        fit predicts over the budget is skipped: warming up must not be the thing that runs out.
        """
        if not self.enabled or key in self.fits and self.fits[key].coef is not None:
            return []
        top = max(16, max_tokens)
        # Equal padded tokens at different lengths tell attention from the rest; then larger
        # batches, whose peaks stand well above the allocator's noise of a few MiB.
        shapes = [(2, top // 2), (4, top // 4), (8, top // 8), (1, top), (4, top // 2), (16, top // 8),
                  (2, top), (8, top // 2), (4, top)]

        def step(items: int, tokens: int) -> bool:
            tokens = max(4, min(tokens, max_tokens))
            if not self.allows(key, items, tokens):
                return True
            try:
                # Twice: the first run of a shape is not measured (its kernels and caches are built then).
                run_shape(items, tokens)
                run_shape(items, tokens)
            except Exception:  # warming up is a measurement: serving goes on without it
                logger.warning("memory warm-up of %s at %dx%d failed", key, items, tokens, exc_info=True)
                return False
            return True

        return [functools.partial(step, items, tokens) for items, tokens in shapes]

    # --- what is shown ------------------------------------------------------------------------
    def cap_tokens(self, key: Key) -> int:
        """The most padded tokens a batch of key may hold at its latest input length (0: no cap yet)."""
        fit = self.fits.get(key)
        if fit is None:
            return 0
        longest = int(self.last.get(key, {}).get("longest", DEFAULT_LONGEST))
        return fit.max_padded_tokens(longest, self.available())

    def report(self, key: Key) -> dict[str, Any]:
        """The fit, its error, the cap and the latest measured batch of key (heartbeat, API, admin)."""
        fit = self.fits.get(key)
        if fit is None:
            return {}
        return {**fit.report(), "cap_tokens": self.cap_tokens(key), "budget_bytes": self.budget_bytes,
                "available_bytes": int(self.available()), "last_batch": self.last.get(key),
                "recent_batches": list(self.history.get(key, ()))}
