"""The scaling rule the shipped autoscalers apply (pure): replicas from an exported metric.

KEDA's Prometheus scaler feeds an HPA with metricType AverageValue: the HPA wants
ceil(metric / target) replicas, within [min, max]. Writing it here lets the suite check
the rule against what /metrics exports, and docs/ and deploy/k8s quote one formula.
"""

from __future__ import annotations

import math

# deploy/k8s/worker-scaledobject.yaml: one worker per this many items waiting or computing.
PENDING_ITEMS_PER_WORKER = 64
MIN_WORKERS, MAX_WORKERS = 1, 8


def desired_replicas(metric: float, target_per_replica: float, min_replicas: int, max_replicas: int) -> int:
    """ceil(metric / target) within [min, max], as an HPA computes it for an AverageValue target."""
    if target_per_replica <= 0:
        raise ValueError("the target per replica must be positive")
    wanted = math.ceil(max(0.0, metric) / target_per_replica)
    return max(min_replicas, min(max_replicas, wanted))


def desired_workers(pending_items: float) -> int:
    """Workers for this many pending items (sum over models and tasks), by the shipped ScaledObject's numbers."""
    return desired_replicas(pending_items, PENDING_ITEMS_PER_WORKER, MIN_WORKERS, MAX_WORKERS)
