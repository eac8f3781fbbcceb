"""observe.tracing as setup() leaves it, on a test's own provider and span processor (restored after the test)."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

from models_registry.observe import tracing

_STATE = ("tracer", "_recorder", "_SERVER", "_INTERNAL")


def traced_by(monkeypatch: pytest.MonkeyPatch, provider: TracerProvider, processor: SpanProcessor) -> None:
    """Record with the provider's tracer (its sampler, ids, resource); finished spans go to the processor."""
    for name in _STATE:
        monkeypatch.setattr(tracing, name, getattr(tracing, name))
    provider.add_span_processor(processor)  # what the provider's own tracer ends goes there too
    tracing.use(provider.get_tracer("models_registry"), processor)
