"""What a process records its spans with: the SDK tracer's sampler, id generator, span limits, resource and
scope, and the span processor each finished SpanRecord goes to (observe.span_record says why records)."""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import SpanLimits, SpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanKind

from models_registry.observe.sampling import Decide, Decision, decider, static_decisions
from models_registry.observe.span_encoding import encode_finished, encode_queued, encode_record
from models_registry.observe.span_export import EncodingSpanProcessor, SpanQueue
from models_registry.observe.span_record import RANDOM_TRACE_ID, SAMPLED, SpanRecord
from models_registry.observe.trace_context import FLAGS_AT, NO_SPAN, Parent, parent_of

logger = logging.getLogger(__name__)

SCOPE = "models_registry"  # the instrumentation scope of every span observe.tracing records
_OUR_MOST_ATTRIBUTES = 16  # no span of ours has more: limits at or above it bound nothing


class SpanRecorder:
    """Starts SpanRecords as the SDK's tracer starts spans (its sampler, ids, flags) and hands finished ones on."""

    def __init__(self, tracer: Any, processor: SpanProcessor, limits: SpanLimits | None = None) -> None:
        self.decide: Decide = decider(tracer.sampler)
        self._static = static_decisions(tracer.sampler)  # what need not be asked of decide()
        self._root_decision = self._static.get(None)
        self.new_span_id: Callable[[], int] = tracer.id_generator.generate_span_id
        self.new_trace_id: Callable[[], int] = tracer.id_generator.generate_trace_id
        # The SDK's RandomIdGenerator draws random.getrandbits (again, in the rare draw of 0: `or` below):
        # drawn here without its Python frame.
        random_ids = type(tracer.id_generator) is RandomIdGenerator
        self._span_bits = functools.partial(random.getrandbits, 64) if random_ids else self.new_span_id
        self._trace_bits = functools.partial(random.getrandbits, 128) if random_ids else self.new_trace_id
        self._root_flags = RANDOM_TRACE_ID if tracer.id_generator.is_trace_id_random() else 0
        self.resource, self.scope = tracer.resource, InstrumentationScope(SCOPE)
        limits = limits or SpanLimits()  # the OTEL_*_LIMIT environment, as the SDK's provider reads it
        self.max_links: int = limits.max_links if limits.max_links is not None else 2**31
        self._bounds: tuple[int | None, int | None] | None = None
        if (limits.max_span_attributes is not None and limits.max_span_attributes < _OUR_MOST_ATTRIBUTES) \
                or limits.max_span_attribute_length is not None:
            self._bounds = (limits.max_span_attributes, limits.max_span_attribute_length)
        self._processor = processor
        # Each record's OTLP bytes queued (nothing the garbage collector tracks), where the processor takes them;
        # else None: each goes to the processor as the SDK's ReadableSpan (one that takes span objects).
        self._queue: SpanQueue | None = processor.bytes_queue(self.resource, self.scope) \
            if isinstance(processor, EncodingSpanProcessor) else None
        unsampled = [Parent(trace_id, 1, 0, True) for trace_id in (1, 2**128 - 1)]
        # Parent-based samplers (the default) and always_off record nothing under an unsampled remote parent.
        self.drops_unsampled = not any(self.decide(p, p.trace_id, "inference.queue", SpanKind.INTERNAL, None, ()).sampled
                                       for p in unsampled)
        # Under a wire context (a remote parent, no tracestate): whether a span is sampled, by the context's sampled
        # bit, where the sampler says so with nothing added and the span's bytes can be written at once (ids
        # random, no limit that binds); else None: record_queued asks as record_all does.
        remote = [self._static.get((True, bit)) for bit in (0, 1)]
        self._wire_sampled: tuple[bool, bool] | None = None
        if random_ids and self._queue is not None and self._bounds is None and all(
                decision is not None and decision.attributes is None and decision.state is None for decision in remote):
            self._wire_sampled = (remote[0].sampled, remote[1].sampled)  # type: ignore[union-attr]

    def start(self, name: str, kind: SpanKind, parent: Parent | None, start: int, attributes: dict[str, Any],
              links: Sequence[bytes] = (), decision: Decision | None = None
              ) -> tuple[int, int, int, SpanRecord | None]:
        """A new span: (trace id, span id, flags, its record: None when the sampler did not sample it).

        decision: the sampler's, when the caller has it; else a static one (static_decisions: every API
        request's span at full sampling) or decide()'s.
        """
        if parent is None:
            trace_id, random_flag = self._trace_bits() or self.new_trace_id(), self._root_flags
            decision = decision or self._root_decision
        else:
            trace_id, random_flag = parent.trace_id, parent.flags & RANDOM_TRACE_ID
            if decision is None and parent.state is None:
                decision = self._static.get((parent.remote, parent.flags & SAMPLED))
        sampled, added, state = decision or self.decide(parent, trace_id, name, kind, attributes, links)
        span_id = self._span_bits() or self.new_span_id()
        if not sampled:
            return trace_id, span_id, random_flag, None
        dropped = 0
        if len(links) > self.max_links:  # as the SDK's BoundedList: the newest kept
            dropped, links = len(links) - self.max_links, links[len(links) - self.max_links:]
        record = SpanRecord(name, kind, trace_id, span_id, SAMPLED | random_flag, parent, start,
                            attributes if added is None else dict(added), state, links, dropped)
        return trace_id, span_id, SAMPLED | random_flag, record

    def record_finished(self, name: str, kind: SpanKind, parent: Parent, start: int, end: int,
                        attributes: dict[str, Any]) -> int | None:
        """A child span whose end is known as it starts (the worker's forward and reply spans), recorded at once;
        its span id, or None when it was not sampled."""
        return self.record_all(name, kind, [(parent, start, end)], attributes)[0]

    def record_all(self, name: str, kind: SpanKind, spans: Sequence[tuple[Parent, int, int]],
                   attributes: dict[str, Any]) -> list[int | None]:
        """Child spans of one name, kind and attributes whose ends are known as they start, each (parent, start,
        end), recorded at once (the worker's queue span of every request in a batch); their span ids (None:
        not sampled).

        Encoded straight to their bytes where nothing asks for records (no tracestate, no attribute the sampler
        adds, no span limit that binds), all in one call and queued with none a span.
        """
        static, plain = self._static, self._queue is not None and self._bounds is None
        ids: list[int | None] = []
        finished = []
        for parent, start, end in spans:
            decision = static.get((parent.remote, parent.flags & SAMPLED)) if parent.state is None else None
            if decision is None:
                decision = self.decide(parent, parent.trace_id, name, kind, attributes, ())
            if not decision.sampled:
                ids.append(None)
                continue
            if plain and decision.attributes is None and decision.state is None:
                span_id = self._span_bits() or self.new_span_id()
                finished.append((parent.trace_id, span_id, parent, start, end))
            else:
                _, span_id, _, record = self.start(name, kind, parent, start, attributes, decision=decision)
                record.end = end  # type: ignore[union-attr]  # sampled: a record
                self.emit(record)  # type: ignore[arg-type]
            ids.append(span_id)
        if finished:
            try:
                datas = encode_finished(name, kind, attributes, finished)
            except Exception as error:  # noqa: BLE001 - never raised into the batch that ended the spans
                logger.error("%d %s spans not exported: %s", len(finished), name, error)
                return ids
            self._queue.put_all(datas)  # type: ignore[union-attr]  # plain: a queue
        return ids

    def record_queued(self, name: str, kind: SpanKind, spans: Sequence[tuple[bytes, int]], end: int,
                      attributes: dict[str, Any]) -> None:
        """Child spans of one name, kind, attributes and end, each (wire context: its remote parent, start in ns: the
        end if later), recorded at once: the worker's queue span of every traced request in a batch.

        Written straight to their bytes where the sampler decides by the sampled flag alone (_wire_sampled): one
        struct pack a span, its ids sliced from the context, one draw of span ids for all, one queue append.
        """
        sampled = self._wire_sampled
        if sampled is None:  # a sampler that asks, span limits, ids of another generator: as record_all records them
            self.record_all(name, kind, [(parent_of(context), start if start < end else end, end)
                                         for context, start in spans], attributes)
            return
        kept = [span for span in spans if sampled[span[0][FLAGS_AT] & 1]]
        if not kept:
            return
        span_ids = random.randbytes(8 * len(kept))  # the SDK's RandomIdGenerator draws the same Mersenne Twister
        if NO_SPAN in span_ids:  # a zero span id (W3C forbids it) may be among them, rarely: drawn one by one then
            span_ids = b"".join([(self._span_bits() or self.new_span_id()).to_bytes(8, "big") for _ in kept])
        try:
            datas = encode_queued(name, kind, attributes, kept, end, span_ids)
        except Exception as error:  # noqa: BLE001 - never raised into the batch that ended the spans
            logger.error("%d %s spans not exported: %s", len(kept), name, error)
            return
        self._queue.put_all(datas)  # type: ignore[union-attr]  # _wire_sampled: a queue

    def emit(self, record: SpanRecord) -> None:
        """Hand a finished record on, its attributes within OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT and
        OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT (bounded at the end: the request adds to them while it runs)."""
        if self._bounds is not None:
            most, length = self._bounds
            record.attributes = BoundedAttributes(most, record.attributes, immutable=True,  # type: ignore[assignment]
                                                  max_value_len=length)
        queue = self._queue
        if queue is None:
            self._processor.on_end(record.readable(self.resource, self.scope))
            return
        try:
            data = encode_record(record)
        except Exception as error:  # noqa: BLE001 - never raised into the request or batch that ended the span
            logger.error("span %s not exported: %s", record.name, error)
            return
        queue.put_all((data,))
