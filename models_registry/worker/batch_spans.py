"""A worker's spans of a computed batch, SDK spans with the times the batch loop measured (ns since the epoch).

Each request that came with a traceparent gets `inference.queue` in its own trace (its arrival at this worker to
the batch's start); the batch one `inference.batch` (formed to ended), a child of its first such request, linked
to every request's span, holding `inference.forward`; the replies' round trip `inference.reply` under the batch.
They are made after the replies went out (the batch loop schedules them so), so no reply waits on them; the
sampler decides each as the SDK's tracer does (parent-based: an unsampled request costs a non-recording span).
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Link

from models_registry.observe import tracing


class BatchTrace:
    """A batch's trace context, set when its spans are recorded (after its replies went out): the reply's parent."""

    __slots__ = ("context",)

    def __init__(self) -> None:
        self.context: Any = None  # record_batch's answer


def _ns(epoch_s: float) -> int:
    return int(epoch_s * 1_000_000_000)


def _parent(traceparent: str, tracestate: str) -> Any:
    """The context of a request's web span from its wire message's fields; None when it names no valid span."""
    carrier = {"traceparent": traceparent, "tracestate": tracestate} if tracestate else {"traceparent": traceparent}
    parent = tracing.propagator.extract(carrier)
    return parent if trace.get_current_span(parent).get_span_context().is_valid else None


def record_batch(traced: BatchTrace, requests: list[tuple[str, str, float]], formed: float, started: float,
                 ended: float, attributes: dict[str, Any]) -> None:
    """The batch's spans; requests: each one's (traceparent, tracestate, arrival); traced.context the batch span's."""
    tracer, start, end = tracing.tracer, _ns(started), _ns(ended)
    links: list[Link] = []
    first = None
    queued = {"hosting.model": attributes.get("hosting.model", "")}
    for traceparent, tracestate, arrival in requests:
        parent = _parent(traceparent, tracestate) if traceparent else None
        if parent is None:
            continue
        queue = tracer.start_span("inference.queue", context=parent, attributes=queued,
                                  start_time=min(_ns(arrival), start))
        if queue.is_recording():  # only a request with spans here is linked (not one its sampler left out)
            links.append(Link(trace.get_current_span(parent).get_span_context()))
            if first is None:
                first = parent
        queue.end(end_time=start)
    if first is None:
        return
    batch = tracer.start_span("inference.batch", context=first, attributes=attributes, links=links,
                              start_time=_ns(formed))
    inside = trace.set_span_in_context(batch)
    tracer.start_span("inference.forward", context=inside, start_time=start).end(end_time=end)
    batch.end(end_time=end)
    traced.context = inside


def record_reply(traced: BatchTrace, replies: int, started: float, ended: float) -> None:
    """The batch's inference.reply span: its replies' one round trip; none when no request had spans."""
    if traced.context is not None:
        tracing.tracer.start_span("inference.reply", context=traced.context, attributes={"hosting.replies": replies},
                                  start_time=_ns(started)).end(end_time=_ns(ended))
