"""What a batch costs in memory: peak bytes fitted against the batch's shape by least squares (pure).

A forward pass over a padded batch allocates activations in proportion to the padded
tokens (items x longest), attention scores in proportion to items x longest squared, and
a little per item; the fit learns the weights from measured peaks, with non-negative
coefficients so a larger batch is never predicted to need less. No torch here: the
worker measures, this module fits, predicts and answers "does this shape fit?".
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

FEATURES = ("constant", "items", "padded_tokens", "attention")  # names of the coefficients, in order
MIN_SAMPLES = 3  # fewer measured batches than this: no prediction, no cap
MAX_SAMPLES = 64  # the newest measurements kept (an allocator that warmed up changes its peaks)
SAFETY = 0.10  # the cap leaves at least this share of the budget over the prediction
SMALL_SHARE = 0.1  # samples under this share of the largest peak count as this large (weights and error)


def features(items: int, longest: int) -> list[float]:
    """The regressors of one batch shape: 1, items, padded tokens, items x longest^2."""
    return [1.0, float(items), float(items * longest), float(items * longest * longest)]


def nonnegative_lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0: refit without the most negative one until none is."""
    active = list(range(x.shape[1]))
    coef = np.zeros(x.shape[1])
    while active:
        solution, *_ = np.linalg.lstsq(x[:, active], y, rcond=None)
        if (solution >= 0).all():
            coef[active] = solution
            return coef
        active.pop(int(np.argmin(solution)))
    return coef


@dataclass(frozen=True)
class Sample:
    """One measured batch: its shape and the peak bytes it added over the resting process."""

    items: int
    longest: int
    peak_bytes: int


class MemoryFit:
    """Peak bytes of one (model, task, device) as a function of batch shape, refitted on each sample."""

    def __init__(self) -> None:
        self.samples: deque[Sample] = deque(maxlen=MAX_SAMPLES)
        self.coef: tuple[float, ...] | None = None
        self.error = 0.0  # largest relative error of the fit on its own samples
        self.ooms = 0  # out-of-memory errors of this task's batches
        self.seen = 0  # batches measured, the discarded first one included
        self.ceiling_tokens = 0  # after an out-of-memory: padded tokens a batch must stay under (0: none)

    def add(self, items: int, longest: int, peak_bytes: int) -> None:
        """Record a measured batch and refit."""
        if items < 1 or longest < 1:
            return
        self.seen += 1
        if self.seen == 1:
            return  # a task's first batch also pays lazy initialisation (kernels, caches): not its shape's cost
        self.samples.append(Sample(items, longest, max(0, int(peak_bytes))))
        self._refit()

    def _refit(self) -> None:
        if len(self.samples) < MIN_SAMPLES:
            return
        x = np.array([features(s.items, s.longest) for s in self.samples])
        y = np.array([float(s.peak_bytes) for s in self.samples])
        # Relative least squares, so the fit is right in proportion across shapes rather than
        # in bytes on the biggest; batches under a tenth of the biggest weigh as if that big
        # (their peaks are mostly allocator noise, and the cap is decided by large batches).
        floor = np.maximum(y, max(1.0, SMALL_SHARE * float(y.max())))
        coef = nonnegative_lstsq(x / floor[:, None], y / floor)
        self.coef = tuple(float(c) for c in coef)
        predicted = x @ coef
        self.error = float(np.max(np.abs(predicted - y) / floor))

    def predict(self, items: int, longest: int) -> float | None:
        """Predicted peak bytes of a batch of items padded to longest tokens; None before enough samples."""
        if self.coef is None:
            return None
        c0, c1, c2, c3 = self.coef
        padded = items * longest
        return c0 + c1 * items + c2 * padded + c3 * padded * longest

    def fits(self, items: int, longest: int, budget_bytes: float) -> bool:
        """Whether the shape's predicted peak, with a margin for the fit's error, is within budget_bytes."""
        if self.ceiling_tokens and items * longest > self.ceiling_tokens and items > 1:
            return False
        predicted = self.predict(items, longest)
        if predicted is None:
            return True  # nothing known yet: the first batches are measured, not refused
        return predicted * (1.0 + max(SAFETY, min(self.error, 1.0))) <= budget_bytes

    def max_padded_tokens(self, longest: int, budget_bytes: float, limit: int = 1 << 16) -> int:
        """The most padded tokens a batch of inputs longest tokens long may hold (the cap, for metrics)."""
        longest = max(1, longest)
        if self.coef is None:
            return 0  # no cap yet
        items = 0
        low, high = 0, max(1, limit // longest)
        while low < high:  # the largest items that fits: predictions grow with items
            mid = (low + high + 1) // 2
            if self.fits(mid, longest, budget_bytes):
                low = mid
            else:
                high = mid - 1
        items = low
        return items * longest

    def lower_after_oom(self, items: int, longest: int) -> None:
        """A batch of this shape ran out of memory: batches must stay below it from now on."""
        padded = items * longest
        self.ooms += 1
        self.ceiling_tokens = padded - 1 if not self.ceiling_tokens else min(self.ceiling_tokens, padded - 1)

    def report(self) -> dict[str, object]:
        """The fit as the heartbeat, the API and the admin show it."""
        return {
            "samples": len(self.samples),
            "coefficients": dict(zip(FEATURES, [round(c, 3) for c in self.coef])) if self.coef else None,
            "max_relative_error": round(self.error, 4) if self.coef else None,
            "oom_ceiling_tokens": self.ceiling_tokens or None,
            "ooms": self.ooms,
        }
