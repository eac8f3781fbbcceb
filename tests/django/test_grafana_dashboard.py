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


@pytest.mark.django_db(transaction=True)
async def test_latency_is_charted_by_route_and_version_from_a_histogram_with_those_labels() -> None:
    from models_registry.observe.version_metrics import observe_route

    panel = next(p for p in json.loads(DASHBOARD.read_text())["panels"] if "route and model version" in p["title"])
    assert all("sum by (le, route, model, version)" in target["expr"] for target in panel["targets"])
    observe_route("v1-chat", "dashboard-model", 7, 0.03)
    text = (await AsyncClient().get("/metrics")).content.decode()
    assert re.search(r'hosting_route_request_duration_seconds_bucket\{(?=[^}]*route="v1-chat")'
                     r'(?=[^}]*model="dashboard-model")(?=[^}]*version="7")(?=[^}]*le="0.05")[^}]*\} 1\.0', text)


def test_versions_past_the_bound_share_one_series(monkeypatch: pytest.MonkeyPatch) -> None:
    from prometheus_client import REGISTRY

    from models_registry.observe import version_metrics

    monkeypatch.setattr(version_metrics, "_route_children", {})
    monkeypatch.setattr(version_metrics, "MAX_ROUTE_SERIES", 2)

    def count(version: str) -> float:
        return REGISTRY.get_sample_value("hosting_route_request_duration_seconds_count",
                                         {"route": "hf", "model": "bounded", "version": version}) or 0.0

    before = count("other")
    for version in (1, 2, 3, 4, 1):
        version_metrics.observe_route("hf", "bounded", version, 1.0)
    assert (count("1"), count("2"), count("3"), count("other") - before) == (2.0, 1.0, 0.0, 2.0)
