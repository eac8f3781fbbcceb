"""The worker's measured cost per token, and the drain capacity the web derives from it for Retry-After."""

from __future__ import annotations

import pytest

from models_registry.broker.handoff import retry_after_s
from models_registry.worker.engine_stats import COST_SMOOTHING, EngineStats


def test_a_batch_records_seconds_per_token_and_tokens_per_item() -> None:
    stats = EngineStats()
    stats.record_batch(("emb", "fe"), items=8, tokens=1600, compute_s=0.8)
    assert stats.costs["emb/fe"] == pytest.approx([0.0005, 200.0])
    stats.record_batch(("emb", "fe"), items=8, tokens=800, compute_s=0.8)  # shorter items, dearer tokens
    assert stats.costs["emb/fe"] == pytest.approx([0.0005 + COST_SMOOTHING * 0.0005, 200 - COST_SMOOTHING * 100])
    assert stats.completed["emb/fe"] == 16


def test_an_idle_queue_keeps_its_cost_so_a_burst_gets_a_real_retry_after() -> None:
    stats = EngineStats()
    stats.record_batch(("emb", "fe"), items=8, tokens=1600, compute_s=0.8)  # 10 items/s
    s_per_token, tokens_per_item = stats.costs["emb/fe"]
    capacity = 1 / (s_per_token * tokens_per_item)
    assert retry_after_s(64, capacity) == 7  # 64 queued items at 10 items/s
    assert retry_after_s(64, 0.0) == 1  # what a drain rate measured on the idle queue gave


def test_an_empty_batch_or_no_compute_time_changes_nothing() -> None:
    stats = EngineStats()
    stats.record_batch(("emb", "fe"), items=3)
    assert stats.costs == {}
