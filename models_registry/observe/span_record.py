"""A sampled span as observe.tracing records it.

A request's spans are few and their shape is ours (observe.tracing): ids, two times, a handful of attributes,
a status, the batch span's links. With the SDK's span object for each (its lock, its BoundedAttributes, a
Context made current through two context managers, the tracer's metrics) the web's traced code cost 38 us a
request at full sampling, on a path of some 250-300 us; with records, 10 us (bench.otel_cost). A SpanRecord holds what the exported span says and nothing else;
span_encoding writes it as the OTLP bytes the SDK's encoder would (tests/unit/test_span_record.py compares
them), and readable() is the SDK's ReadableSpan of it, for any span processor that wants span objects.
The tracer's sampler, id generator, span limits, resource and scope, the batch processor and the exporter
stay the SDK's own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import SpanKind, Status, StatusCode

from models_registry.observe.sampling import span_context
from models_registry.observe.trace_context import Parent, parent_of

SAMPLED, RANDOM_TRACE_ID = 0x01, 0x02  # W3C trace flags


class SpanRecord:
    """One sampled span: its ids, parent, times (ns since the epoch), attributes, status, links and events."""

    __slots__ = ("name", "kind", "trace_id", "span_id", "flags", "parent", "start", "end", "attributes",
                 "status", "message", "links", "dropped_links", "events", "state")

    def __init__(self, name: str, kind: SpanKind, trace_id: int, span_id: int, flags: int, parent: Parent | None,
                 start: int, attributes: dict[str, Any], state: Any = None, links: Sequence[bytes] = (),
                 dropped_links: int = 0) -> None:
        self.name, self.kind, self.trace_id, self.span_id, self.flags = name, kind, trace_id, span_id, flags
        self.parent, self.start, self.end, self.attributes, self.state = parent, start, 0, attributes, state
        self.status: StatusCode = StatusCode.UNSET
        self.message: str | None = None
        self.links, self.dropped_links = links, dropped_links
        self.events: tuple[Event, ...] = ()  # an exception's, rarely: no list a span until then

    def fail(self, message: str | None = None) -> None:
        """Set the status to ERROR (with a description, as the SDK keeps one only for ERROR)."""
        self.status, self.message = StatusCode.ERROR, message

    def add_exception(self, error: BaseException, timestamp: int) -> None:
        """The `exception` event the SDK's record_exception adds (type, message, stack trace, escaped)."""
        import traceback

        module, name = type(error).__module__, type(error).__qualname__
        self.events += (Event("exception", {
            "exception.type": f"{module}.{name}" if module and module != "builtins" else name,
            "exception.message": str(error), "exception.stacktrace": "".join(traceback.format_exception(error)),
            "exception.escaped": "False"}, timestamp=timestamp),)

    def readable(self, resource: Any, scope: Any) -> ReadableSpan:
        """The SDK's ReadableSpan of this record, as its tracer would have ended it."""
        own = trace.SpanContext(self.trace_id, self.span_id, is_remote=False, trace_flags=trace.TraceFlags(self.flags),
                                trace_state=self.state)
        return ReadableSpan(self.name, context=own, parent=span_context(self.parent) if self.parent else None,
                            resource=resource, attributes=_frozen(self.attributes), events=self.events,
                            links=_links(self.links, self.dropped_links), kind=self.kind,
                            status=Status(self.status, self.message), start_time=self.start, end_time=self.end,
                            instrumentation_scope=scope)


def _links(links: Sequence[bytes], dropped: int) -> BoundedList:
    """The links (wire contexts) as the SDK's span holds them (a BoundedList: ReadableSpan.dropped_links reads its
    count)."""
    bounded = BoundedList(None)
    bounded.extend([trace.Link(span_context(parent_of(link))) for link in links])
    bounded.dropped = dropped
    return bounded


def _frozen(attributes: Mapping[str, Any]) -> Any:
    """The attributes as the SDK's ReadableSpan holds them (already bounded by the span limits: kept, dropped count
    and all)."""
    from opentelemetry.attributes import BoundedAttributes

    if isinstance(attributes, BoundedAttributes):
        return attributes
    return BoundedAttributes(attributes=attributes, immutable=True)
