"""With no OTLP endpoint set, tracing costs nothing: no tracer, and neither the SDK nor the exporter is imported by a
web or a worker process. (redis-py 8 imports the opentelemetry API and SDK metrics itself when installed, for its own
metrics, which stay off until a program turns them on: that import is redis', not ours.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from models_registry.observe import server_span
from tests.stack import ROOT

IMPORTS = """
import os, sys
os.environ["DJANGO_SETTINGS_MODULE"] = "hosting.settings"
import django
django.setup()
import hosting.asgi  # the web process' application (its front door sets tracing up)
from models_registry.management.commands import runworker  # the worker process' command
from models_registry.observe import tracing
tracing.setup("worker")
print(__import__("json").dumps({"tracer": tracing.tracer is not None, "otel": sorted(
    m for m in sys.modules if m.startswith(("opentelemetry.sdk.trace", "opentelemetry.exporter",
                                         "opentelemetry.instrumentation")))}))
"""


def _imports(tmp_path: Path, **env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    result = subprocess.run([sys.executable, "-c", IMPORTS], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**clean, "HOSTING_VAR_DIR": str(tmp_path), "REDIS_URL": "redis://127.0.0.1:1/0",
                                 **env})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_without_an_endpoint_no_tracer_provider_or_exporter_is_imported(tmp_path: Path) -> None:
    assert _imports(tmp_path) == {"tracer": False, "otel": []}


def test_with_an_endpoint_the_sdk_is_set_up(tmp_path: Path) -> None:
    found = _imports(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:1")
    assert found["tracer"] is True and "opentelemetry.sdk.trace" in found["otel"]
    assert "opentelemetry.instrumentation.redis" in found["otel"]  # a request's Redis calls nest under its span


def test_routes_are_named_by_their_template() -> None:
    assert server_span.http_route("/models/bert") == "/models/{name}"
    assert server_span.http_route("/models/bert/fill-mask") == "/models/{name}/{task}"
    assert server_span.http_route("/v1/embeddings") == "/v1/embeddings"
