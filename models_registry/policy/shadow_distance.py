"""How far a shadow version's answer is from live's (pure): 0 the same, up to 1 (2 for opposite vectors)."""

from __future__ import annotations

import math
from typing import Any


def _flat(value: Any) -> list[float] | None:
    """The numbers of a (nested) list of numbers, in order; None when it is anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, list) and value:
        out: list[float] = []
        for item in value:
            flat = _flat(item)
            if flat is None:
                return None
            out.extend(flat)
        return out
    return None


def _top_label(value: Any) -> str | None:
    """A classifier's top label: from {label, score}, a list of them (best first), or {labels: [...]}."""
    if isinstance(value, list) and value and isinstance(value[0], dict):
        value = max(value, key=lambda v: v.get("score", 0) if isinstance(v, dict) else 0)
    if isinstance(value, dict):
        if "label" in value:
            return str(value["label"])
        if isinstance(value.get("labels"), list) and value["labels"]:
            return str(value["labels"][0])
    return None


def cosine_distance(a: list[float], b: list[float]) -> float:
    """1 - cos(a, b); 1.0 when the lengths differ (another hidden size: nothing in common) or a vector is 0."""
    if len(a) != len(b):
        return 1.0
    dot = sum(x * y for x, y in zip(a, b))
    norms = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return 1.0 - dot / norms if norms else 1.0


def item_distance(live: Any, other: Any) -> float:
    """One input's distance: cosine for vectors, label disagreement for classifiers, else inexact match."""
    a, b = _flat(live), _flat(other)
    if a is not None and b is not None:
        return cosine_distance(a, b)
    label_a, label_b = _top_label(live), _top_label(other)
    if label_a is not None and label_b is not None:
        return 0.0 if label_a == label_b else 1.0
    return 0.0 if live == other else 1.0


def distance(live: list[Any], other: list[Any]) -> float:
    """The mean distance over a request's inputs (1.0 when the answers differ in count)."""
    if len(live) != len(other) or not live:
        return 1.0
    return sum(item_distance(a, b) for a, b in zip(live, other)) / len(live)
