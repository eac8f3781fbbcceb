"""JSON schemas of the two custom resources in deploy/k8s, written from their documented fields.

The Kubernetes schemas bundled with kubernetes-validate cover built-in kinds only. These
follow KEDA's ScaledObject reference (keda.sh/docs/2.x/reference/scaledobject-spec) and
the Prometheus Operator's ServiceMonitor API (monitoring.coreos.com/v1): unknown fields are
refused, so a misspelt key fails here rather than being dropped by the cluster.
"""

from __future__ import annotations

from typing import Any

_METADATA: dict[str, Any] = {
    "type": "object", "required": ["name"],
    "properties": {"name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                   "labels": {"type": "object", "additionalProperties": {"type": "string"}}},
}

SCALED_OBJECT: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": _METADATA,
        "spec": {
            "type": "object", "required": ["scaleTargetRef", "triggers"], "additionalProperties": False,
            "properties": {
                "scaleTargetRef": {
                    "type": "object", "required": ["name"], "additionalProperties": False,
                    "properties": {"name": {"type": "string"}, "apiVersion": {"type": "string"},
                                   "kind": {"type": "string"}, "envSourceContainerName": {"type": "string"}},
                },
                "pollingInterval": {"type": "integer", "minimum": 1},
                "cooldownPeriod": {"type": "integer", "minimum": 0},
                "initialCooldownPeriod": {"type": "integer", "minimum": 0},
                "idleReplicaCount": {"type": "integer", "minimum": 0},
                "minReplicaCount": {"type": "integer", "minimum": 0},
                "maxReplicaCount": {"type": "integer", "minimum": 1},
                "fallback": {"type": "object", "required": ["failureThreshold", "replicas"],
                             "properties": {"failureThreshold": {"type": "integer"}, "replicas": {"type": "integer"}}},
                "advanced": {
                    "type": "object", "additionalProperties": False,
                    "properties": {
                        "restoreToOriginalReplicaCount": {"type": "boolean"},
                        "horizontalPodAutoscalerConfig": {
                            "type": "object", "additionalProperties": False,
                            "properties": {"name": {"type": "string"}, "behavior": {"type": "object"}},
                        },
                    },
                },
                "triggers": {
                    "type": "array", "minItems": 1,
                    "items": {
                        "type": "object", "required": ["type", "metadata"], "additionalProperties": False,
                        "properties": {
                            "type": {"type": "string"},
                            "name": {"type": "string"},
                            "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                            "useCachedMetrics": {"type": "boolean"},
                            # Every trigger's metadata values are strings (thresholds too).
                            "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
                            "authenticationRef": {"type": "object", "required": ["name"]},
                        },
                    },
                },
            },
        },
    },
}

PROMETHEUS_TRIGGER: dict[str, Any] = {
    "type": "object", "required": ["serverAddress", "query", "threshold"],
    "properties": {"serverAddress": {"type": "string", "pattern": "^https?://"}, "query": {"type": "string"},
                   "threshold": {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$"},
                   "activationThreshold": {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$"}},
}

SERVICE_MONITOR: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": _METADATA,
        "spec": {
            "type": "object", "required": ["selector", "endpoints"],
            "properties": {
                "selector": {"type": "object"},
                "endpoints": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "additionalProperties": False,
                    "properties": {"port": {"type": "string"}, "path": {"type": "string"},
                                   "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                                   "scheme": {"enum": ["http", "https"]}, "bearerTokenSecret": {"type": "object"}},
                }},
            },
        },
    },
}

CUSTOM = {"ScaledObject": SCALED_OBJECT, "ServiceMonitor": SERVICE_MONITOR}
