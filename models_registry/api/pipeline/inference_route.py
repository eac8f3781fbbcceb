"""The one skeleton of every inference route, a pipeline of values: read, authorize, resolve, prepare, admit, send.

The HF route (`/models/<name>[/<task>]`), OpenAI's `/v1/embeddings`, chat and completions,
TEI's `/rerank` and `/tokenize` differ only in how they read a body, name a model and shape
an answer: each is an InferenceRoute, and `serve` runs its steps in the order every route
shares, from any transport (the API's ASGI handler, Django's views, a batch-job line). Each
step returns a value the next takes: the route's request value, the token's grant (auth
checks the model the value names), the Work, the gate's Admission, which the hand-off sends
(to the workers whole, or as streams: Work.streaming) unless the cache answered or the web
computes the answer itself (Work.here); nothing is handed down to be called back up. The
record is written here, once. Every error of the hierarchy becomes the route's error answer
here; nothing else ever reaches a client.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Protocol

from models_registry.api.pipeline import request_record
from models_registry.api.pipeline.answer import Answer
from models_registry.api.pipeline.call import ApiCall
from models_registry.broker.handoff import InferenceResult
from models_registry.broker.stream_handoff import Opening, Stream
from models_registry.core.errors import HostingError, MethodNotAllowed, internal_error
from models_registry.broker import stream_handoff
from models_registry.catalog import lookups
from models_registry.policy import auth, dispatch, gate, shadow
from models_registry.catalog.specs import ModelSpec, TaskSpec
from models_registry.media import item as media_item

logger = logging.getLogger("models_registry.requests")


class StreamShape(Protocol):
    """How one streamed request's events become its answer, and what it counted of them."""

    log_route: str  # the route in its log line ("stream" for TGI's, "v1-chat", "v1-completions")
    sse: bool  # server-sent events as they come; else one JSON body once every stream ended

    def events(self, streams: list[Stream]) -> AsyncGenerator[bytes, None]:
        """The answer's events (or its one JSON body); a HostingError raised mid-way ends them."""

    def error_event(self, error: HostingError) -> bytes:
        """The event telling the client its stream failed after the first byte."""

    def tally(self) -> request_record.StreamTally:
        """What was counted so far: the tokens to charge, the streams, the log line's own fields."""


@dataclass
class Streaming:
    """A request answered as it is generated: one stream per opening, answered in the route's shape."""

    openings: list[Opening]
    shape: StreamShape


@dataclass
class Work:
    """What a prepared request hands to the workers, and how its result becomes the answer's body."""

    inputs: list[Any]
    parameters: dict[str, Any]
    counted_inputs: int  # as the client counts them, for the log line
    asked_priority: str | None = None
    shape: Callable[[InferenceResult], Any] | None = None  # None: the outputs as they came
    use_cache: bool = True
    streaming: Streaming | None = None  # set when the answer is generated as streams (no cache)
    here: Callable[[], Awaitable[InferenceResult]] | None = None  # set when the web computes it (no worker)


class InferenceRoute(Protocol):
    """One route's own steps; serve() runs them."""

    label: str  # the route in logs and metrics ("hf", "v1", "rerank")

    def read(self, call: ApiCall, path: dict[str, str]) -> tuple[str, Any]:
        """(the model name the request names, what was read of it) before the model is known."""

    def resolve(self, wanted: Any, specs: dict[str, ModelSpec]) -> tuple[ModelSpec, TaskSpec]:
        """The registered model and task the request calls, among specs (404 when none)."""

    async def prepare(self, call: ApiCall, wanted: Any, spec: ModelSpec, task: TaskSpec) -> Work:
        """The inputs and parameters for the task (400 when the request does not fit it)."""

    def error(self, error: HostingError, request_id: str) -> Answer:
        """The route's error shape."""


# A body this large is read (parsed and validated) in a thread of its own: a megabyte of JSON took
# 20-40 ms of the event loop, and two clients sending them without pause held /health's p99 at 220 ms.
# The GIL still passes to the loop every switch interval (5 ms); one thread, so such bodies queue
# behind each other instead of taking a bigger share of the process.
LARGE_BODY_BYTES = 64 * 1024
_large_bodies = ThreadPoolExecutor(max_workers=1, thread_name_prefix="body-reader")


async def _read(route: InferenceRoute, call: ApiCall, path: dict[str, str]) -> tuple[str, Any]:
    """route.read, off the event loop for a large body."""
    if len(call.body) < LARGE_BODY_BYTES:
        return route.read(call, path)
    return await asyncio.get_running_loop().run_in_executor(_large_bodies, route.read, call, path)


async def serve(route: InferenceRoute, call: ApiCall, path: dict[str, str]) -> Answer:
    """The answer to call on route: never raises, never a stack trace."""
    try:
        return await _serve(route, call, path)
    except HostingError as error:
        return route.error(error, call.request_id)
    except Exception:
        logger.exception("unhandled error in %s (request %s)", call.path, call.request_id)
        return route.error(internal_error(call.request_id), call.request_id)


async def _serve(route: InferenceRoute, call: ApiCall, path: dict[str, str]) -> Answer:
    started = time.perf_counter()
    if call.method != "POST":
        raise MethodNotAllowed(f"{call.method} is not allowed here; use POST", headers={"Allow": "POST"})
    try:
        model, wanted = await _read(route, call, path)
    except HostingError as error:  # told only once the token is good: a stranger hears 401, never what is wrong
        model, wanted, unread = None, None, error
    else:
        unread = None
    grant = await auth.authorize(call.authorization, model, call.acting_token_id, call.staff)
    if unread is not None:
        raise unread
    catalog = await lookups.snapshot()  # one view of the registry and the workers for the whole path
    spec, task = route.resolve(wanted, catalog.specs)
    try:
        work = await route.prepare(call, wanted, spec, task)
        media = media_item.count(work.inputs)  # once: the charge's estimate and the usage ledger read it
        ask = gate.Ask(grant, work.inputs, spec, task, work.parameters, work.asked_priority, catalog.workers,
                       work.use_cache, work.streaming is not None, work.here is not None, media)
        admission = await gate.admit(ask)
        if work.streaming is not None:
            return await _streamed(call, grant, spec, task, work.streaming, admission, started)
        served = await _answered(call.request_id, work, ask, admission)
        body = work.shape(served.result) if work.shape is not None else served.result.outputs
    except HostingError as error:
        request_record.failed(call.request_id, route.label, spec.name, task.name, error, started,
                              request_record.grant_id(grant), spec.version)
        raise
    return request_record.served_answer(call.request_id, route.label, spec.name, task.name, body, served,
                                        work.counted_inputs, started, request_record.grant_id(grant),
                                        media, timings=work.here is None)


async def _answered(request_id: str, work: Work, ask: gate.Ask, admission: gate.Admission) -> gate.Served:
    """The admission's answer: the cache's, the web's own (work.here), or a worker's; its charge settled."""
    try:
        if admission.hit is not None:
            result = admission.hit
        elif work.here is not None:
            result = await work.here()
        else:
            assert ask.spec is not None and ask.task is not None and admission.target is not None
            result = await dispatch.to_worker(request_id, ask.spec, ask.task, work.inputs, work.parameters,
                                              admission.place, admission.target, admission.plan)
            gate.passed(admission)
    except BaseException as error:
        gate.failed(admission, error)  # a rate limit's 429 raises here; else its tokens are refunded
        raise
    return await gate.keep(admission, ask, result)


async def _streamed(call: ApiCall, grant: auth.TokenGrant | None, spec: ModelSpec, task: TaskSpec,
                    streaming: Streaming, admission: gate.Admission, started: float) -> Answer:
    """Open the admitted streams (errors raise here, before any byte) and answer their events.

    Once they end, however they end, the streams are closed, the charge settled to the tokens
    counted and the request recorded (a whole answer that failed: by the caller, as any error).
    """
    target = admission.target
    assert target is not None
    klass, queue_limit = admission.place
    try:
        streams = await stream_handoff.open_streams(
            streaming.openings, admission.plan, model=target.wire, task=task.name, timeout_s=task.timeout_s,
            drain_rate=target.drain_rate, max_queue_size=queue_limit, priority=klass, client=admission.client,
            whole=not streaming.shape.sse, adapter=target.adapter_wire)
        headers = gate.passed(admission)
    except BaseException as error:
        gate.failed(admission, error)  # a rate limit's 429 raises here; else its tokens are refunded
        raise
    first_token_s = time.perf_counter() - started
    shape = streaming.shape
    headers = {**headers, "X-Time-To-First-Token-Ms": f"{first_token_s * 1000:.2f}",
               **target.headers()}

    def finish(failure: HostingError | None, gone: bool, record: bool = True) -> None:
        texts = [stream.text for stream in streams]
        for stream in streams:
            stream.close()
        # A shadow sees streams too (of a base's versions: an adapter's copy is a later step, as in policy.dispatch).
        if target.copy_to and not spec.base and failure is None and not gone and None not in texts:
            shadow.compare_streams_soon(spec, task, streaming.openings, texts, target.copy_to)  # type: ignore[arg-type]
        tally = shape.tally()
        gate.settle(admission, tally.tokens)
        if record:
            request_record.streamed(call.request_id, shape.log_route, spec.name, task.name, tally, first_token_s,
                                    started, failure, gone, request_record.grant_id(grant), target.version,
                                    admission.metered)
        else:
            request_record.count_token(admission.metered, tally.tokens)

    if not shape.sse:
        try:
            async with aclosing(shape.events(streams)) as parts:
                body = b"".join([part async for part in parts])
        except HostingError:
            finish(None, False, record=False)  # recorded as the error it is answered with
            raise
        except BaseException:
            finish(None, True)
            raise
        finish(None, False)
        return Answer(200, body, headers)

    async def events() -> AsyncIterator[bytes]:
        failure, gone = None, False
        try:
            async with aclosing(shape.events(streams)) as parts:  # closed with the answer, not by the GC
                async for event in parts:
                    yield event
        except HostingError as error:
            failure = error
            yield shape.error_event(error)
        except BaseException:  # the client went away (the handler cancels the response)
            gone = True
            raise
        finally:
            finish(failure, gone)

    return Answer(200, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no",  # proxies pass events at once
                                **headers}, content_type="text/event-stream", events=events())
