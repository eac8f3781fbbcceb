"""The view side of the hand-off: charge, admit and send in one script (broker.enqueue), await the request's own reply."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from models_registry.broker import admission, deferred, enqueue, messages, queue_state
from models_registry.broker.work_layer import WorkLayer, work_layer
from models_registry.catalog.served_check import ServedVersion, still_served
from models_registry.core.errors import HostingError, Overloaded, Timeout, Unavailable, from_wire
from models_registry.core.waits import done_within
from models_registry.observe import tracing

BROKER_TIMEOUT_S = 1.0  # a broker that does not answer within a second is down
SERVED_CHECK_EVERY_S = 1.0

_background: set[asyncio.Task[Any]] = set()


@dataclass(frozen=True)
class InferenceResult:
    """A worker's answer and what happened on the way."""

    outputs: list[Any]
    queue_ms: float
    compute_ms: float
    batch_size: int
    tokens: int = 0
    version: int = 0  # the model version that answered (0: a model without versions)


def retry_after_s(depth: int, drain_rate: float) -> int:
    """Seconds until the queue has likely drained enough to take a request, 1 to 60."""
    if drain_rate <= 0:
        return 1
    return max(1, min(60, math.ceil(depth / drain_rate)))


def in_background(coro: Awaitable[Any]) -> None:
    """Run coro as a task this module keeps a reference to until it ends (a clean-up no request waits for)."""
    task = asyncio.ensure_future(coro)
    _background.add(task)
    task.add_done_callback(_background.discard)


async def _leave_quietly(layer: WorkLayer, model: str, task: str, request_id: str, count: int) -> None:
    try:
        await asyncio.wait_for(admission.leave(layer, model, task, request_id, count), BROKER_TIMEOUT_S)
    except Exception:
        pass  # the entry expires at its deadline anyway


def queue_full(model: str, task: str, depth: int, limit: int, wait: int, priority: str | None = None) -> Overloaded:
    """The 503 of a task's queue too full to take a request (of priority's traffic, when known), with Retry-After."""
    traffic = f" for {priority} traffic" if priority else ""
    return Overloaded(f"{model}/{task} has {depth} items queued (limit {limit}{traffic}); retry in {wait} s",
                      headers={"Retry-After": str(wait)})


async def enqueue_request(layer: WorkLayer, model: str, task: str, channel: str, message: dict[str, Any],
                          places: enqueue.QueuePlaces, drain_rate: float, priority: str, plan: enqueue.ChargePlan | None,
                          reply: tuple[str, asyncio.Future[Any] | asyncio.Queue[Any], Any] | None = None) -> None:
    """Charge (plan), admit (places) and send to channel in one round trip (a unary request's or a stream's);
    Overloaded (with Retry-After), ChargeRefused or Unavailable when not.

    reply: (reply channel, a future or a stream's queue, reader) for the layer to hand the worker's answer.
    """
    # Within a second: the turn pipeline's deadline (broker.turn_pipeline.shared), one timer per loop turn instead of
    # one per request; a sharded ring's second round trip gets its own.
    try:
        status, depth = await layer.enqueue(channel, message, places, plan, batch=priority == "batch", reply=reply)
    except Exception as error:
        raise Unavailable(f"the message broker is unreachable ({type(error).__name__})") from None
    if status == enqueue.QUEUE_FULL:
        wait = retry_after_s(depth + len(places.members), drain_rate)
        if priority != "batch":  # refused at the task's own limit (batch traffic's is lower)
            queue_state.note_full(model, task, depth, places.limit, wait)
        raise queue_full(model, task, depth, places.limit, wait, priority)
    if status == enqueue.CHANNEL_FULL:
        deferred.writes.leave(layer, places.pending_key, places.members)  # admitted on a sharded ring
        raise Overloaded("the inference channel is full; retry later", headers={"Retry-After": "1"})
    if status == enqueue.RATE_REFUSED:
        raise enqueue.ChargeRefused()
    # Filling the queue does not mark it full: a place frees as soon as any request is answered,
    # and 16 clients on a queue of 16 must never see a 503 (tests/integration/test_faults.py).
    queue_state.note_admitted(model, task)


def leave_later(layer: WorkLayer, model: str, task: str, key: str, count: int) -> None:
    """Give the request's places back, without waiting for the broker."""
    in_background(_leave_quietly(layer, model, task, key, count))


async def infer(
    *,
    request_id: str,
    model: str,
    task: str,
    inputs: list[str],
    parameters: dict[str, Any],
    timeout_s: float,
    max_queue_size: int,
    drain_rate: float = 0.0,
    served: ServedVersion | None = None,
    priority: str = "interactive",
    charge: enqueue.ChargePlan | None = None,
    version: int = 0,
    adapter: str = "",
) -> InferenceResult:
    """Run inputs through model/task on some worker; raises a HostingError on failure.

    charge: the token's rate-limit charge (policy.gate's plan), made in the same script as the
    admission and the send; its outcome lands in the plan, and a refusal raises ChargeRefused.
    request_id is the client's (logs and the response header): clients reuse theirs on
    retries, so admission, the message and its reply are keyed on an id made here. version: the
    model version the wire name model stands for (catalog.rollout), stated on the result; adapter: the LoRA
    adapter of model that computes it ("": the base). served: the version
    whose serving is checked every second while the reply is awaited (None: no check), a value, not a callback.
    """
    layer = work_layer()
    deadline = time.time() + timeout_s
    count = len(inputs)
    reply_channel = await layer.new_channel()
    key = reply_channel.rpartition("!")[2]  # the channel's own random part (a uuid4's hex): no second one to make
    receiver: asyncio.Future[messages.WorkResult] = asyncio.get_running_loop().create_future()
    traceparent, tracestate = tracing.wire_context() if tracing.tracer is not None else ("", "")
    message = messages.WorkRequest(
        id=key, reply=reply_channel, model=model, task=task,
        inputs=inputs, parameters=parameters, deadline=deadline, priority=priority,
        traceparent=traceparent, tracestate=tracestate, adapter=adapter,
    ).to_wire()
    channel = messages.model_channel(model)
    places = admission.places(layer, model, task, key, count, deadline, max_queue_size)
    admitted = False
    try:
        # The token's charge (from the policy gate), admission and the send: one round trip.
        await enqueue_request(layer, model, task, channel, message, places, drain_rate, priority, charge,
                              (reply_channel, receiver, messages.WorkResult.from_wire))
        admitted = True

        async def still_queued() -> bool:
            """False once the broker answers without this request's admission entry (restarted empty)."""
            try:
                return bool(await asyncio.wait_for(admission.still_wanted(layer, model, task, [key]), BROKER_TIMEOUT_S))
            except Exception:
                return True  # broker away: wait for it to return (or for the deadline)

        reply = await _await_reply(receiver, deadline, timeout_s, model, served, still_queued)
        admitted = not reply.left  # the worker gave the places back with its answer
    finally:
        receiver.cancel()  # nothing once answered; else the layer stops waiting for the reply
        if admitted:
            # At once, not batched with the turn's other writes (broker.deferred): a client that
            # sends its next request as soon as it has this answer must find the place free.
            in_background(_leave_quietly(layer, model, task, key, count))
    if reply.error_type:
        error: HostingError = from_wire(reply.error_type, reply.error or "inference failed")
        if reply.retry_after:
            error.headers["Retry-After"] = reply.retry_after
        raise error
    return InferenceResult(outputs=reply.outputs or [], queue_ms=reply.queue_ms, compute_ms=reply.compute_ms,
                           batch_size=reply.batch_size, tokens=reply.tokens, version=version)


async def _await_reply(
    receiver: asyncio.Future[messages.WorkResult], deadline: float, timeout_s: float, model: str,
    served: ServedVersion | None, still_queued: Callable[[], Awaitable[bool]],
) -> messages.WorkResult:
    """The reply, or Timeout at the deadline, or Unavailable once no live worker serves model
    or the broker lost the request (its admission entry vanished: Redis restarted empty)."""
    while True:
        remaining = deadline - time.time()
        if remaining <= 0:
            raise Timeout(f"no result within {timeout_s:g} s")
        if await done_within(receiver, min(remaining, SERVED_CHECK_EVERY_S)):
            return receiver.result()
        if served is not None and not await still_served(served):
            raise Unavailable(f"no live worker serves model {model!r} any more")
        # An entry also leaves the set at its deadline (any admit prunes expired ones): near
        # it, a missing entry means time is up, not that the broker lost the request.
        if not await still_queued() and not receiver.done() and time.time() < deadline - SERVED_CHECK_EVERY_S:
            # A worker takes the entry away in the script that sends its answer, which may still be
            # on its way to this process (the reply pump): lost only if it does not come in time.
            if await done_within(receiver, SERVED_CHECK_EVERY_S):
                return receiver.result()
            raise Unavailable("the message broker lost this request (it restarted); retry",
                              headers={"Retry-After": "1"})
