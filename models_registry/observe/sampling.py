"""The tracer's sampler asked per span without the objects the SDK makes for it on every span.

The SDK's Tracer asks its sampler with a Context that holds the parent (a SpanContext in a NonRecordingSpan
in a Context) and gets a SamplingResult back: about 4 us of objects per span, twice per request at full
sampling. The samplers the SDK ships (OTEL_TRACES_SAMPLER: always_on, always_off, traceidratio and every
parentbased_* of them) decide from the parent's flags and the trace id alone; for those, decider() returns
that decision as a function of (parent, trace id). Any other sampler (one a plugin names, one a test sets)
is asked through its own should_sample, as the SDK asks it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from opentelemetry import trace
from opentelemetry.sdk.trace.sampling import ParentBased, Sampler, StaticSampler, TraceIdRatioBased
from opentelemetry.trace import SpanKind

from models_registry.observe.trace_context import Parent, parent_of


class Decision(NamedTuple):
    """Whether the span is sampled (recorded and exported), the attributes the sampler adds, its tracestate."""

    sampled: bool
    attributes: Mapping[str, Any] | None
    state: Any


Decide = Callable[[Parent | None, int, str, SpanKind, Mapping[str, Any] | None, Sequence[Any]], Decision]
_Fast = Callable[[Parent | None, int], bool]

_PARENT_BASED_PARTS = ("_root", "_remote_parent_sampled", "_remote_parent_not_sampled",
                       "_local_parent_sampled", "_local_parent_not_sampled")


def _fast(sampler: Sampler) -> _Fast | None:
    """The decision of a sampler the SDK ships, from the parent's flags and the trace id; None for any other."""
    kind = type(sampler).should_sample
    if kind is StaticSampler.should_sample:
        sampled = _static_sampled(sampler)
        return lambda parent, trace_id: sampled
    if kind is TraceIdRatioBased.should_sample:
        bound, limit = sampler.bound, TraceIdRatioBased.TRACE_ID_LIMIT  # type: ignore[attr-defined]
        return lambda parent, trace_id: trace_id & limit < bound
    if kind is ParentBased.should_sample and all(hasattr(sampler, part) for part in _PARENT_BASED_PARTS):
        parts = [_fast(getattr(sampler, part)) for part in _PARENT_BASED_PARTS]
        if any(part is None for part in parts):
            return None
        root, remote_sampled, remote_unsampled, local_sampled, local_unsampled = parts

        def parent_based(parent: Parent | None, trace_id: int) -> bool:
            if parent is None:
                return root(parent, trace_id)  # type: ignore[misc]
            if parent.remote:
                chosen = remote_sampled if parent.flags & 1 else remote_unsampled
            else:
                chosen = local_sampled if parent.flags & 1 else local_unsampled
            return chosen(parent, trace_id)  # type: ignore[misc]

        return parent_based
    return None


def _static_sampled(sampler: Sampler) -> bool | None:
    """What a StaticSampler (always_on, always_off) decides for every span; None for any other sampler."""
    if type(sampler).should_sample is StaticSampler.should_sample:
        return bool(sampler.should_sample(None, 1, "probe").decision.is_sampled())
    return None


# static_decisions' keys, in the order of _PARENT_BASED_PARTS: the root, then (remote, sampled) of the parent.
_PARENT_KINDS = (None, (True, True), (True, False), (False, True), (False, False))


def static_decisions(sampler: Sampler) -> dict[Any, Decision]:
    """The sampler's decisions that need no trace id: {None: a root span's, (remote, sampled): under such a
    parent's}, each where the sampler for it is a StaticSampler (the default parentbased_always_on has them
    all); the others are left out. Under a parent with a tracestate the decision keeps it: not one of these.
    """
    if type(sampler).should_sample is ParentBased.should_sample and all(hasattr(sampler, p) for p in _PARENT_BASED_PARTS):
        parts = [getattr(sampler, part) for part in _PARENT_BASED_PARTS]
    else:
        parts = [sampler] * len(_PARENT_KINDS)
    decided = {key: _static_sampled(part) for key, part in zip(_PARENT_KINDS, parts)}
    return {key: Decision(sampled, None, None) for key, sampled in decided.items() if sampled is not None}


def span_context(parent: Parent) -> trace.SpanContext:
    """The OpenTelemetry SpanContext of a parent (or of a link's span)."""
    return trace.SpanContext(parent.trace_id, parent.span_id, is_remote=parent.remote,
                             trace_flags=trace.TraceFlags(parent.flags), trace_state=parent.state)


def context_of(parent: Parent | None) -> Any:
    """The OpenTelemetry Context holding a parent as its current span, as the SDK's samplers read it."""
    return None if parent is None else trace.set_span_in_context(trace.NonRecordingSpan(span_context(parent)))


def decider(sampler: Sampler) -> Decide:
    """decide(parent, trace_id, name, kind, attributes, links: the linked spans' wire contexts): the sampler's
    decision."""
    fast = _fast(sampler)
    if fast is not None:
        stateless = {True: Decision(True, None, None), False: Decision(False, None, None)}

        def decide_fast(parent: Parent | None, trace_id: int, name: str, kind: SpanKind,
                        attributes: Mapping[str, Any] | None, links: Sequence[Any]) -> Decision:
            # The SDK's samplers add no attributes and keep the parent's tracestate.
            if parent is None or parent.state is None:
                return stateless[fast(parent, trace_id)]
            return Decision(fast(parent, trace_id), None, parent.state)

        return decide_fast

    def decide_by_asking(parent: Parent | None, trace_id: int, name: str, kind: SpanKind,
                         attributes: Mapping[str, Any] | None, links: Sequence[Any]) -> Decision:
        result = sampler.should_sample(context_of(parent), trace_id, name, kind, attributes,
                                       [trace.Link(span_context(parent_of(link))) for link in links])
        return Decision(result.decision.is_sampled(), result.attributes or None, result.trace_state)

    return decide_by_asking
