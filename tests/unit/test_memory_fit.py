"""The batch memory model: non-negative least squares over batch shapes, the cap, and the ceiling after an OOM."""

from __future__ import annotations

import numpy as np
import pytest

from models_registry.capacity.memory_fit import MIN_SAMPLES, MemoryFit, nonnegative_lstsq


def peak(items: int, longest: int) -> float:
    """A made-up model: 1 MB fixed, 2 KB per item, 40 KB per padded token, 30 B per attention cell."""
    return 1e6 + 2e3 * items + 4e4 * items * longest + 30.0 * items * longest**2


def trained(shapes: list[tuple[int, int]]) -> MemoryFit:
    fit = MemoryFit()
    fit.add(1, 8, 50_000_000)  # the first batch pays lazy initialisation: discarded
    for items, longest in shapes:
        fit.add(items, longest, int(peak(items, longest)))
    return fit


def test_no_prediction_and_no_cap_before_enough_samples() -> None:
    fit = trained([(1, 8), (2, 16)][: MIN_SAMPLES - 1])
    assert fit.predict(4, 32) is None
    assert fit.fits(10_000, 512, 1.0)  # unknown cost: measured first, not refused
    assert fit.max_padded_tokens(128, 1e6) == 0


def test_fit_recovers_the_shape_costs_and_predicts_held_out_shapes() -> None:
    fit = trained([(1, 8), (2, 64), (4, 32), (1, 256), (8, 16), (2, 512)])
    for items, longest in [(16, 128), (3, 300), (32, 64)]:
        assert fit.predict(items, longest) == pytest.approx(peak(items, longest), rel=0.02)
    assert fit.error < 0.02
    assert fit.report()["samples"] == 6


def test_the_first_measured_batch_is_not_a_sample() -> None:
    fit = MemoryFit()
    fit.add(1, 8, 10**9)
    assert not fit.samples and fit.seen == 1


def test_coefficients_are_never_negative() -> None:
    x = np.array([[1.0, 1.0], [1.0, 2.0], [1.0, 3.0]])
    y = np.array([3.0, 2.0, 1.0])  # decreasing: unconstrained slope would be -1
    coef = nonnegative_lstsq(x, y)
    assert (coef >= 0).all()
    assert coef[1] == 0.0 and coef[0] == pytest.approx(2.0)


def test_cap_is_the_largest_shape_whose_prediction_with_margin_fits() -> None:
    fit = trained([(1, 8), (2, 64), (4, 32), (1, 256), (8, 16)])
    budget = 50e6
    tokens = fit.max_padded_tokens(100, budget)
    items = tokens // 100
    assert items > 1
    assert fit.fits(items, 100, budget) and not fit.fits(items + 1, 100, budget)
    assert peak(items, 100) * 1.1 <= budget * 1.02


def test_an_out_of_memory_batch_lowers_the_ceiling_below_its_shape() -> None:
    fit = trained([(1, 8), (2, 64), (4, 32)])
    assert fit.fits(8, 100, 1e12)
    fit.lower_after_oom(8, 100)
    assert not fit.fits(8, 100, 1e12) and fit.fits(4, 100, 1e12)
    assert fit.fits(1, 5000, 1e12)  # one input alone is always tried
    fit.lower_after_oom(4, 100)
    assert fit.ceiling_tokens == 399
