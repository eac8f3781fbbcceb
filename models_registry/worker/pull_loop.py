"""The pull loop: each turn takes what this worker can start soon and queues it, one step's value the next's input.

A turn: the room (how many messages, and the channels of the models ready to compute
them), one leased pull from all those channels, then each message read into its request,
admitted by intake and queued, or refused with the error its client gets; the batch loop
is woken, and when the pull found everything waiting the turn ends waiting for a sender's
doorbell. This module is the one place that says that order: each step is called from
here and hands back a value, none calls back up (tests/broker/test_worker_path.py traces
a turn).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from models_registry.broker.messages import WorkRequest, model_channel
from models_registry.broker.work_layer import Pulled, WorkLayer
from models_registry.core.batch_types import QueueFull, UnknownKey
from models_registry.core.errors import HostingError, Internal, Overloaded, Unavailable
from models_registry.core.task_key import TaskKey
from models_registry.inference.containment import contained, describe
from models_registry.worker import adapter_waits, intake
from models_registry.worker.delivery import Delivery, Lease
from models_registry.worker.engine import InferenceEngine

logger = logging.getLogger(__name__)

IDLE_WAIT_S = 1.0  # the longest a turn sleeps on the doorbells or for room: a ring it missed costs no more
NO_MODEL_WAIT_S = 0.2  # no model ready yet: look again soon (a model becoming ready sets no event here)
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.1, 2.0


@dataclass(frozen=True)
class Room:
    """How many messages this worker should take now, and the channels of the models it can compute now."""

    channels: list[str]
    count: int


class PullLoop:
    """Takes only what one engine can start soon, from the models it has ready, until it drains.

    Each model has its own channel, so a worker never takes a request it cannot serve; the
    channels are visited in turn so no model starves the others.
    """

    def __init__(self, layer: WorkLayer, engine: InferenceEngine) -> None:
        self.layer = layer
        self.engine = engine
        self.turns = 0  # the channel a turn's pull starts with
        self.waits = adapter_waits.AdapterWaits()  # requests whose adapter this worker does not list yet

    async def run(self) -> None:
        """Turn until the engine drains; a broker away is retried, and service resumes by itself."""
        backoff = BACKOFF_FIRST_S
        while not self.engine.draining:
            self.take_waiting()
            room = self.room()
            if room.count <= 0 or not room.channels:
                await self.engine.batch_loop.wait_for_room(IDLE_WAIT_S if room.channels else NO_MODEL_WAIT_S)
                continue
            try:
                await self.turn(room)
                backoff = BACKOFF_FIRST_S
            except asyncio.CancelledError:
                raise
            except Exception as error:
                logger.warning("pulling work failed (%s); retrying in %.1fs", error, backoff)
                await asyncio.sleep(backoff)
                backoff = min(BACKOFF_MAX_S, backoff * 2)

    def room(self) -> Room:
        """How many more messages to take now (no hoarding), and the channels of the models ready for them.

        Two batches' worth per task: enough to form the next batch while one computes, and the
        rest stays in Redis for other workers.
        """
        engine = self.engine
        ready = engine.models.ready()
        sizes = [task.policy.max_batch_size for slot in ready for task in slot.spec.tasks.values()]
        limit = max(8, 2 * max(sizes, default=4))
        count = 0 if engine.draining else max(0, limit - sum(engine.batcher.depths().values()))
        return Room([model_channel(slot.spec.name) for slot in ready], count)

    async def turn(self, room: Room) -> None:
        """Pull what room holds, queue it, then wait for a doorbell if nothing more is waiting."""
        self.turns = (self.turns + 1) % len(room.channels)
        channels = room.channels[self.turns:] + room.channels[:self.turns]
        pulled = await self.layer.pull(channels, self.engine.worker_id, room.count)
        self.take(pulled)
        if len(pulled) < room.count:  # everything waiting is taken: sleep until a sender rings a doorbell
            await self.layer.wait_for_work(room.channels, IDLE_WAIT_S)

    def take(self, pulled: list[Pulled]) -> None:
        """Queue the pulled messages' requests (never blocks), answer at once those refused, wake the batch loop."""
        engine = self.engine
        queued = False
        for lease, message, redelivered in pulled:
            request = WorkRequest.from_wire(message, redelivered)
            if request is None:
                logger.warning("dropped a malformed inference message: %.200r", message)
                engine.replies.release(lease)
            else:
                queued = self.take_one(request, lease) or queued
        if queued:
            engine.batch_loop.wake()

    def take_waiting(self) -> None:
        """Look again at the requests waiting for their adapter, once per registry refresh."""
        refreshes = self.engine.models.refreshes
        queued = False
        for waiting in self.waits.due(refreshes):
            queued = self.take_one(waiting.request, waiting.lease, waiting.since) or queued
        if queued:
            self.engine.batch_loop.wake()

    def take_one(self, request: WorkRequest, lease: Lease, since: int | None = None) -> bool:
        """Queue one request, send it back, hold it for its adapter, or answer it; whether it was queued."""
        engine = self.engine
        refreshes = engine.models.refreshes
        since = refreshes if since is None else since
        if engine.models.on_demand(request.model) and not engine.draining:
            self.send_back(request, lease)  # unloaded (or reloading) while it was pulled: it waits for a holder
            return False
        if not engine.draining and adapter_waits.waits_for_listing(request, engine.models.get(request.model), since,
                                                                   refreshes):
            self.waits.hold(request, lease, since, refreshes)  # registered after this worker's last refresh
            return False
        return self.queue(request, lease)

    def queue(self, request: WorkRequest, lease: Lease) -> bool:
        """Admit request and queue it, or answer it with the error that refused it; whether it was queued."""
        engine = self.engine
        key = TaskKey(request.model, request.task)
        try:
            admitted = intake.admit(request, engine.models.get(request.model), engine.draining, engine.media)
            engine.batcher.submit(
                key, request.id, admitted.payloads, admitted.costs, time.time(), request.deadline,
                delivery=Delivery(reply=request.reply, parameters=request.parameters, lease=lease,
                                  tokens=admitted.tokens, suspect=request.redelivered, client=request.client,
                                  traceparent=request.traceparent, tracestate=request.tracestate, adapter=request.adapter),
                priority=request.priority,
            )
            return True
        except QueueFull as full:
            engine.stats.rejected += 1
            error: HostingError = Overloaded(f"queue of {key} is full ({full.depth}/{full.limit} items); retry later",
                                             headers={"Retry-After": "1"})
        except UnknownKey:
            error = Unavailable(f"{key} is not served by this worker")
        except HostingError as refused:
            error = refused
        except BaseException as failed:  # a tokenizer panic while counting: this request's 500, not the worker's end
            if not contained(failed):
                raise
            logger.exception("could not queue request %s", request.id)
            error = Internal(f"could not read this request: {describe(failed)}")
        engine.replies.error(request.id, request.reply, error, lease)
        return False

    def send_back(self, request: WorkRequest, lease: Lease) -> None:
        """Put request back on its model's channel, in a task of its own; its lease goes once it is there."""

        async def send_back() -> None:
            try:
                await self.layer.send(model_channel(request.model), request.to_wire())
            except Exception:
                logger.exception("could not send a message back to its channel; its lease requeues it")
                return
            self.engine.replies.release(lease)

        asyncio.ensure_future(send_back())
