"""Which spans are sampled: the SDK's samplers as they ship, our default ratio, and no trace begun by a bare Redis call.

Default (OTEL_TRACES_SAMPLER unset): parentbased_traceidratio at DEFAULT_RATIO, or at OTEL_TRACES_SAMPLER_ARG when
that is set: a client's own decision is followed, one in ten new traces is kept (docs/operating.md says why ten).
OTEL_TRACES_SAMPLER set: the sampler the SDK's TracerProvider picks from the environment (plug-ins included).
Either way a CLIENT span with no parent (redis-py's instrumentation around the reply pump's or the worker's pull
loop's commands, which serve no one request) starts no trace: Redis spans appear only under a request's span.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import Decision, ParentBasedTraceIdRatio, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind, TraceState
from opentelemetry.util.types import Attributes

logger = logging.getLogger(__name__)

DEFAULT_RATIO = 0.1  # of new traces (a client's traceparent decides for its own): docs/operating.md
_DROP = SamplingResult(Decision.DROP)


class NoBareClientSpans(Sampler):
    """Drops a CLIENT span without a parent (a Redis call outside any request); asks the wrapped sampler otherwise."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler

    def should_sample(self, parent_context: Context | None, trace_id: int, name: str, kind: SpanKind | None = None,
                      attributes: Attributes = None, links: Sequence[Link] | None = None,
                      trace_state: TraceState | None = None) -> SamplingResult:
        """DROP for a parentless CLIENT span, else the wrapped sampler's decision."""
        if kind is SpanKind.CLIENT and not trace.get_current_span(parent_context).get_span_context().is_valid:
            return _DROP
        return self.sampler.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)

    def get_description(self) -> str:
        """The wrapped sampler's description, marked."""
        return f"NoBareClientSpans{{{self.sampler.get_description()}}}"


def default_ratio() -> float:
    """OTEL_TRACES_SAMPLER_ARG as a ratio in [0, 1], else DEFAULT_RATIO (with a warning when it is malformed)."""
    value = os.environ.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
    if not value:
        return DEFAULT_RATIO
    try:
        ratio = float(value)
    except ValueError:
        ratio = -1.0
    if not 0.0 <= ratio <= 1.0:
        logger.warning("OTEL_TRACES_SAMPLER_ARG=%r is no ratio in [0, 1]: sampling %s of new traces", value,
                       DEFAULT_RATIO)
        return DEFAULT_RATIO
    return ratio


def from_environment() -> Sampler:
    """The process' sampler: OTEL_TRACES_SAMPLER's as the SDK reads it, else parentbased_traceidratio; no bare CLIENT
    roots."""
    if os.environ.get("OTEL_TRACES_SAMPLER", "").strip():
        # A provider built without a sampler takes the one the environment names (the SDK's public behaviour).
        chosen = TracerProvider(resource=Resource.get_empty(), shutdown_on_exit=False).sampler
    else:
        chosen = ParentBasedTraceIdRatio(default_ratio())
    return NoBareClientSpans(chosen)
