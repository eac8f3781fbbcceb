"""worker.batch_spans on the SDK's own tracer: a batch's spans join its sampled requests' traces and link them; a
request whose trace was not sampled costs no recorded span and no link under a parent-based sampler, and still
gets its spans where the sampler decides for itself; a malformed traceparent is no trace."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, Sampler, TraceIdRatioBased

from models_registry.broker import messages
from models_registry.worker import batch_spans
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


def _record(parents: list[Any], state: str = "") -> batch_spans.BatchTrace:
    """A batch of requests whose wire messages carried these traceparents, read as broker.messages reads them."""
    requests = []
    for parent in parents:
        wire = messages.WorkRequest("r", "c", "m", "t", [], {}, 1.0).to_wire()
        wire.update(traceparent=parent, tracestate=state)
        read = messages.WorkRequest.from_wire(wire)
        assert read is not None
        requests.append((read.traceparent, read.tracestate, 100.0))
    traced = batch_spans.BatchTrace()
    batch_spans.record_batch(traced, requests, 100.001, 100.002, 100.010, ATTRIBUTES)
    batch_spans.record_reply(traced, len(parents), 100.010, 100.011)
    return traced


def _ids(traceparent: str) -> tuple[str, str]:
    return traceparent.split("-")[1], traceparent.split("-")[2]


def test_sampled_requests_get_queue_spans_in_their_traces_and_one_linked_batch(provider_of: Any) -> None:
    finished = provider_of(ParentBased(ALWAYS_ON))
    assert _record([SAMPLED, RANDOM_SAMPLED, ""]).context is not None  # "": a request that came without a trace
    spans = finished.get_finished_spans()
    queues = [s for s in spans if s.name == "inference.queue"]
    assert sorted((f"{s.parent.trace_id:032x}", f"{s.parent.span_id:016x}") for s in queues) == [
        _ids(SAMPLED), _ids(RANDOM_SAMPLED)]
    assert all(s.parent.is_remote and s.attributes["hosting.model"] == "bert" for s in queues)
    assert all((s.start_time, s.end_time) == (100_000_000_000, 100_002_000_000) for s in queues)
    (batch,) = [s for s in spans if s.name == "inference.batch"]
    assert [(f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}") for link in batch.links] == [
        _ids(SAMPLED), _ids(RANDOM_SAMPLED)]
    assert dict(batch.attributes) == ATTRIBUTES and f"{batch.context.trace_id:032x}" == _ids(SAMPLED)[0]
    assert (batch.start_time, batch.end_time) == (100_001_000_000, 100_010_000_000)
    for child in ("inference.forward", "inference.reply"):
        (span,) = [s for s in spans if s.name == child]
        assert span.parent.span_id == batch.context.span_id


def test_a_tracestate_is_kept_on_the_workers_spans(provider_of: Any) -> None:
    finished = provider_of(ParentBased(ALWAYS_ON))
    _record([SAMPLED], state="vendor=x")
    (queue,) = [s for s in finished.get_finished_spans() if s.name == "inference.queue"]
    assert queue.context.trace_state.get("vendor") == "x"


@pytest.mark.parametrize("sampler", [ParentBased(ALWAYS_ON), ParentBased(TraceIdRatioBased(1.0)), ALWAYS_OFF])
def test_an_unsampled_trace_costs_the_worker_no_span_and_no_link(provider_of: Any, sampler: Sampler) -> None:
    finished = provider_of(sampler)
    assert _record([UNSAMPLED, UNSAMPLED]).context is None
    assert finished.get_finished_spans() == ()
    if sampler is not ALWAYS_OFF:
        _record([UNSAMPLED, SAMPLED])
        (batch,) = [s for s in finished.get_finished_spans() if s.name == "inference.batch"]
        assert [f"{link.context.trace_id:032x}" for link in batch.links] == [_ids(SAMPLED)[0]]
        assert len([s for s in finished.get_finished_spans() if s.name == "inference.queue"]) == 1


def test_a_sampler_that_decides_for_itself_still_gets_an_unsampled_parents_spans(provider_of: Any) -> None:
    finished = provider_of(ALWAYS_ON)  # not parent-based: the SDK would record under any parent
    assert _record([UNSAMPLED]).context is not None
    names = sorted(s.name for s in finished.get_finished_spans())
    assert names == ["inference.batch", "inference.forward", "inference.queue", "inference.reply"]


@pytest.mark.parametrize("parent", ["garbage", "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                                    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-more",
                                    "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
                                    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-zz",
                                    "00-00000000000000000000000000000000-b7ad6b7169203331-01",
                                    "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
                                    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b71692033-01", 7, None, b"\x01" * 25])
def test_a_malformed_traceparent_is_no_trace(provider_of: Any, parent: Any) -> None:
    finished = provider_of(ALWAYS_ON)
    assert _record([parent]).context is None and finished.get_finished_spans() == ()
