"""observe.sampling: parentbased_traceidratio at DEFAULT_RATIO unless the OTEL_* environment names another sampler
or ratio, and no trace begun by a parentless CLIENT span (a Redis call outside any request)."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags

from models_registry.observe import sampling

LOW_TRACE_ID, HIGH_TRACE_ID = 1, 2**64 - 1  # the ratio samplers compare the trace id's low 64 bits


def _parent(sampled: bool) -> object:
    context = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, is_remote=True,
                          trace_flags=TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT))
    return trace.set_span_in_context(NonRecordingSpan(context))


def _decision(trace_id: int, kind: SpanKind = SpanKind.SERVER, parent: object = None) -> Decision:
    return sampling.from_environment().should_sample(parent, trace_id, "span", kind).decision  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"):
        monkeypatch.delenv(name, raising=False)


def test_the_default_keeps_a_tenth_of_new_traces_and_follows_a_clients_decision() -> None:
    assert sampling.DEFAULT_RATIO == 0.1
    assert "ParentBased" in sampling.from_environment().get_description()
    assert "0.1" in sampling.from_environment().get_description()
    assert _decision(LOW_TRACE_ID) is Decision.RECORD_AND_SAMPLE and _decision(HIGH_TRACE_ID) is Decision.DROP
    assert _decision(HIGH_TRACE_ID, parent=_parent(True)) is Decision.RECORD_AND_SAMPLE
    assert _decision(LOW_TRACE_ID, parent=_parent(False)) is Decision.DROP


@pytest.mark.parametrize(("value", "ratio"), [("1.0", 1.0), ("0", 0.0), ("0.25", 0.25), ("2", 0.1), ("half", 0.1)])
def test_the_sampler_arg_sets_the_default_ratio(monkeypatch: pytest.MonkeyPatch, value: str, ratio: float) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", value)
    assert sampling.default_ratio() == ratio


def test_a_sampler_the_environment_names_is_the_sdks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    assert _decision(LOW_TRACE_ID, parent=_parent(True)) is Decision.DROP
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_on")
    assert _decision(HIGH_TRACE_ID, parent=_parent(False)) is Decision.RECORD_AND_SAMPLE
    assert sampling.from_environment().get_description() == "NoBareClientSpans{AlwaysOnSampler}"


def test_a_client_span_starts_no_trace_but_nests_under_a_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_on")
    assert _decision(LOW_TRACE_ID, SpanKind.CLIENT) is Decision.DROP
    assert _decision(LOW_TRACE_ID, SpanKind.CLIENT, _parent(True)) is Decision.RECORD_AND_SAMPLE
    assert _decision(LOW_TRACE_ID, SpanKind.INTERNAL) is Decision.RECORD_AND_SAMPLE
