"""observe.tracing's worker side on the SDK's own tracer: a batch's spans join its sampled requests' traces and
link them; a request whose trace was not sampled costs no span and no link where the sampler would record
nothing under it, and still gets its spans where the sampler decides for itself."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, Sampler, TraceIdRatioBased

from models_registry.observe import tracing
from models_registry.observe.trace_context import pack_context, parent_of, parse_traceparent, wire_context
from tests.unit.tracing_setup import traced_by

SAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
RANDOM_SAMPLED = "00-1af7651916cd43dd8448eb211c80319c-c7ad6b7169203331-03"  # W3C level 2: random trace id, sampled
UNSAMPLED = "00-2af7651916cd43dd8448eb211c80319c-d7ad6b7169203331-00"
ATTRIBUTES = {"hosting.model": "bert", "hosting.batch.size": 3, "hosting.device": "cpu", "hosting.backend": "torch"}


@pytest.fixture
def provider_of(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Sampler], InMemorySpanExporter]]:
    """tracing's globals as setup() leaves them, on a provider with the sampler given; its finished spans."""
    providers: list[TracerProvider] = []

    def make(sampler: Sampler) -> InMemorySpanExporter:
        spans = InMemorySpanExporter()
        provider = TracerProvider(sampler=sampler)
        providers.append(provider)
        traced_by(monkeypatch, provider, SimpleSpanProcessor(spans))
        return spans

    yield make
    for provider in providers:
        provider.shutdown()


def _record(parents: list[Any]) -> Any:
    """A batch of requests whose wire messages carried these traces (a web's traceparent, as an older web wrote
    it, or the bytes observe.trace_context packs), read as broker.messages reads them."""
    contexts = [wire_context(parent) for parent in parents]
    batch = tracing.record_batch([(context, 100.0) for context in contexts], 100.001, 100.002, 100.010, ATTRIBUTES)
    if batch is not None:
        tracing.record_reply(batch, len(parents), 100.010, 100.011)
    return batch


def _hex(span: Any) -> tuple[str, str]:
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


def test_sampled_requests_get_queue_spans_in_their_traces_and_one_linked_batch(provider_of: Any) -> None:
    finished = provider_of(ParentBased(ALWAYS_ON))
    assert _record([SAMPLED, RANDOM_SAMPLED, ""]) is not None  # "": a request that came without a trace
    spans = finished.get_finished_spans()
    queues = [s for s in spans if s.name == "inference.queue"]
    assert sorted(f"{s.parent.trace_id:032x}-{s.parent.span_id:016x}" for s in queues) == [
        "-".join(SAMPLED.split("-")[1:3]), "-".join(RANDOM_SAMPLED.split("-")[1:3])]
    assert all(s.parent.is_remote and s.attributes["hosting.model"] == "bert" for s in queues)
    (batch,) = [s for s in spans if s.name == "inference.batch"]
    assert [(f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}") for link in batch.links] == [
        tuple(SAMPLED.split("-")[1:3]), tuple(RANDOM_SAMPLED.split("-")[1:3])]
    assert dict(batch.attributes) == ATTRIBUTES and _hex(batch)[0] == SAMPLED.split("-")[1]
    for child in ("inference.forward", "inference.reply"):
        (span,) = [s for s in spans if s.name == child]
        assert span.parent.span_id == batch.context.span_id


@pytest.mark.parametrize("sampler", [ParentBased(ALWAYS_ON), ParentBased(TraceIdRatioBased(1.0)), ALWAYS_OFF])
def test_an_unsampled_trace_costs_the_worker_no_span_and_no_link(provider_of: Any, sampler: Sampler) -> None:
    finished = provider_of(sampler)
    assert _record([UNSAMPLED, UNSAMPLED]) is None
    assert finished.get_finished_spans() == ()
    if sampler is not ALWAYS_OFF:
        _record([UNSAMPLED, SAMPLED])
        (batch,) = [s for s in finished.get_finished_spans() if s.name == "inference.batch"]
        assert [f"{link.context.trace_id:032x}" for link in batch.links] == [SAMPLED.split("-")[1]]
        assert len([s for s in finished.get_finished_spans() if s.name == "inference.queue"]) == 1


def test_a_sampler_that_decides_for_itself_still_gets_an_unsampled_parents_spans(provider_of: Any) -> None:
    finished = provider_of(ALWAYS_ON)  # not parent-based: the SDK would record under any parent
    assert _record([UNSAMPLED]) is not None
    names = sorted(s.name for s in finished.get_finished_spans())
    assert names == ["inference.batch", "inference.forward", "inference.queue", "inference.reply"]


@pytest.mark.parametrize("parent", ["garbage", "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                                    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-more",
                                    "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
                                    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-zz",
                                    "00-00000000000000000000000000000000-b7ad6b7169203331-01",
                                    "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
                                    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b71692033-01"])
def test_a_malformed_traceparent_is_no_trace(provider_of: Any, parent: str) -> None:
    assert wire_context(parent) == b""
    finished = provider_of(ALWAYS_ON)
    assert _record([parent]) is None and finished.get_finished_spans() == ()


def _bytes(traceparent: str) -> bytes:
    parent = parse_traceparent(traceparent)
    return pack_context(parent.trace_id, parent.span_id, parent.flags)  # type: ignore[union-attr]


@pytest.mark.parametrize("context", [_bytes(SAMPLED)[:24], _bytes(SAMPLED) + b"\x00", bytes(16) + _bytes(SAMPLED)[16:],
                                     _bytes(SAMPLED)[:16] + bytes(8) + b"\x01", 7, None, ["x"]],
                         ids=["short", "long", "no trace id", "no span id", "an int", "none", "a list"])
def test_a_malformed_wire_context_is_no_trace(provider_of: Any, context: Any) -> None:
    finished = provider_of(ALWAYS_ON)
    assert wire_context(context) == b""
    assert _record([context]) is None and finished.get_finished_spans() == ()


def test_a_wire_context_names_the_same_parent_as_its_traceparent() -> None:
    for traceparent in (SAMPLED, RANDOM_SAMPLED, UNSAMPLED):
        assert wire_context(_bytes(traceparent)) == wire_context(traceparent) == _bytes(traceparent)
        assert parent_of(_bytes(traceparent)) == parse_traceparent(traceparent)


@pytest.mark.parametrize(("sampler", "wires", "traced"), [
    (ParentBased(ALWAYS_ON), [UNSAMPLED, "", UNSAMPLED], False), (ParentBased(ALWAYS_ON), [UNSAMPLED, SAMPLED], True),
    (ParentBased(ALWAYS_ON), [RANDOM_SAMPLED], True), (ALWAYS_OFF, [SAMPLED], True), (ALWAYS_ON, [UNSAMPLED], True),
    (ALWAYS_ON, ["", ""], False)])
def test_a_batch_is_traced_only_when_a_request_could_get_a_span(provider_of: Any, sampler: Sampler, wires: list[str],
                                                                traced: bool) -> None:
    provider_of(sampler)
    assert tracing.batch_traced([wire_context(wire) for wire in wires]) is traced
    if not traced:  # what the worker then skips would have recorded nothing
        assert _record(wires) is None
