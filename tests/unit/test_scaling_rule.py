"""The scaling rule (an HPA's AverageValue target, as KEDA's Prometheus scaler drives it)."""

from __future__ import annotations

import pytest

from models_registry.core.scaling import MAX_WORKERS, MIN_WORKERS, desired_replicas, desired_workers


@pytest.mark.parametrize("metric, expected", [(0, 1), (1, 1), (64, 1), (65, 2), (200, 4), (10_000, 8), (-5, 1)])
def test_workers_follow_pending_items_within_bounds(metric: float, expected: int) -> None:
    assert desired_workers(metric) == expected
    assert MIN_WORKERS <= desired_workers(metric) <= MAX_WORKERS


def test_the_rule_is_ceil_of_metric_over_target() -> None:
    assert desired_replicas(7.0, 2.0, 0, 100) == 4
    assert desired_replicas(0.0, 2.0, 0, 100) == 0  # scale to zero where min allows
    with pytest.raises(ValueError):
        desired_replicas(1.0, 0.0, 1, 2)
