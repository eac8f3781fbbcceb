"""observe.tracing as setup() leaves it, on a test's own provider and span processor (restored after the test)."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

from models_registry.observe import tracing


def traced_by(monkeypatch: pytest.MonkeyPatch, provider: TracerProvider, processor: SpanProcessor) -> None:
    """Record with the provider's tracer (its sampler, ids, resource); finished spans go to the processor."""
    for name in ("tracer", "provider"):
        monkeypatch.setattr(tracing, name, getattr(tracing, name))
    provider.add_span_processor(processor)
    tracing.use(provider)
