"""Every manifest in deploy/k8s against the Kubernetes schemas (offline: kubernetes-validate bundles them), the
custom resources against tests/unit/crd_schemas.py, and the scaling numbers against core.scaling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from kubernetes_validate import utils as k8s

from models_registry.core import scaling
from tests.unit.crd_schemas import CUSTOM, PROMETHEUS_TRIGGER

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
KUBERNETES_VERSION = "1.37.0"
MANIFESTS = sorted(K8S.glob("*.yaml"))


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [d for p in MANIFESTS for d in documents(p) if d["kind"] == kind]


@pytest.mark.parametrize("path", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_manifest_is_valid(path: Path) -> None:
    for document in documents(path):
        if document["kind"] in CUSTOM:
            jsonschema.validate(document, CUSTOM[document["kind"]])
        else:
            k8s.validate(document, KUBERNETES_VERSION, strict=True)  # raises on an unknown or wrong field


def test_the_validator_refuses_a_wrong_field() -> None:
    """The check can fail: a misspelt field and a wrong type are refused."""
    web = documents(K8S / "web.yaml")[0]
    web["spec"]["replica"] = 2
    with pytest.raises(k8s.ValidationError):
        k8s.validate(web, KUBERNETES_VERSION, strict=True)
    scaled = by_kind("ScaledObject")[0]
    scaled["spec"]["triggers"][0]["metadata"]["threshold"] = 64
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(scaled, CUSTOM["ScaledObject"])


def test_workers_scale_on_the_exported_pending_items_by_the_tested_rule() -> None:
    (scaled,) = by_kind("ScaledObject")
    spec = scaled["spec"]
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    jsonschema.validate(trigger["metadata"], PROMETHEUS_TRIGGER)
    assert "hosting_queue_pending_items" in trigger["metadata"]["query"]
    assert float(trigger["metadata"]["threshold"]) == scaling.PENDING_ITEMS_PER_WORKER
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (scaling.MIN_WORKERS, scaling.MAX_WORKERS)
    assert spec["scaleTargetRef"]["name"] in {d["metadata"]["name"] for d in by_kind("Deployment")}


def test_web_has_an_hpa_and_gpu_workers_ask_for_a_gpu() -> None:
    (hpa,) = by_kind("HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "model-hosting-web"
    (gpu,) = [d for d in by_kind("Deployment") if d["metadata"]["name"] == "model-hosting-worker-gpu"]
    container = gpu["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert {"name": "HOSTING_DEVICE", "value": "cuda"} in container["env"]
