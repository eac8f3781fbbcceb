"""deploy/grafana/model-hosting.json charts only metrics that /metrics exposes (a renamed metric fails here)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.asgi_client import AsyncClient

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "model-hosting.json"
NAME = re.compile(r"\b(hosting_[a-z_]+|django_[a-z_]+|process_[a-z_]+)\b")
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}


def exposed(text: str) -> set[str]:
    """Every sample name a scrape may carry: from each family's TYPE line, and the samples themselves."""
    names = {line.split("{")[0].split()[0] for line in text.splitlines() if line and not line.startswith("#")}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split()
            if kind == "counter":  # prometheus_client names a counter's family with its _total already
                names.add(family if family.endswith("_total") else family + "_total")
            names |= {family + suffix for suffix in SUFFIXES.get(kind, ("",))}
    return names


def used(dashboard: dict) -> set[str]:
    return {name for panel in dashboard["panels"] for target in panel["targets"] for name in NAME.findall(target["expr"])}


@pytest.mark.django_db(transaction=True)
async def test_every_metric_the_dashboard_charts_is_on_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    response = await AsyncClient().get("/metrics")
    assert response.status_code == 200
    names = used(dashboard)
    assert len(names) >= 12  # queue depth, batch size, latency, versions, errors, workers, memory
    assert names - exposed(response.content.decode()) == set()


def test_the_check_sees_a_missing_metric() -> None:
    dashboard = {"panels": [{"targets": [{"expr": "rate(hosting_no_such_thing_total[5m])"}]}]}
    assert used(dashboard) - exposed("# TYPE hosting_inference_requests_total counter\n") == {
        "hosting_no_such_thing_total"}
