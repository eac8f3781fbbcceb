"""The worker's inference engine: admission, batching, one compute thread, replies.

One engine per `runworker` process. The consumer hands it messages and returns at once;
the engine's own tasks form batches with the pure Batcher, run them in a dedicated
thread (one pipeline at a time on the device), and send each request its own answer.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from models_registry.api.errors import HostingError, Internal, InvalidInput, Overloaded, Unavailable
from models_registry.broker import admission, messages
from models_registry.registry.specs import ModelSpec
from models_registry.worker.batcher import Batch, Batcher, ItemFailure, PendingRequest, QueueFull, UnknownKey

logger = logging.getLogger(__name__)

ABANDON_CHECK_AFTER_S = 0.05


@dataclass
class ModelSlot:
    """What this worker holds for one model."""

    spec: ModelSpec
    state: str = "loading"  # loading, ready, error
    error: str = ""
    loaded: Any = None  # runner.LoadedModel once ready


@dataclass
class EngineStats:
    """Counters the heartbeat reports."""

    batches: int = 0
    items: int = 0
    expired: int = 0
    rejected: int = 0
    dropped: int = 0  # clients gone before compute
    started_at: float = field(default_factory=time.time)
    completed: dict[str, int] = field(default_factory=dict)  # items answered per "model/task"


class InferenceEngine:
    """Owns the batcher, the loaded models and the compute thread of one worker."""

    def __init__(self, channel_layer: Any, runner: Any, serve_models: list[str] | None = None) -> None:
        self.layer = channel_layer
        self.runner = runner
        self.serve_models = set(serve_models or [])
        # No quiet time: the pull loop hands over everything waiting in Redis at once, so an
        # idle device has nothing more to wait for (SPEC: an idle worker starts at once).
        self.batcher = Batcher(idle_quiet_s=0.0)
        self.slots: dict[str, ModelSlot] = {}
        self.stats = EngineStats()
        self.worker_id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.draining = False
        self._wake = asyncio.Event()
        self._compute = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compute")
        self._loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="loader")
        self._busy = False
        self._reply_tasks: set[asyncio.Task[None]] = set()
        self._to_release: list[tuple[str, bytes]] = []
        self._release_task: asyncio.Task[None] | None = None
        self._room = asyncio.Event()
        self._rates: dict[str, float] = {}
        self._rate_sample: tuple[float, dict[str, int]] = (time.time(), {})

    # --- intake (called by the consumer; never blocks) ---------------------------------
    def submit(self, message: dict[str, Any], lease: tuple[str, bytes] | None = None) -> None:
        """Queue one request message, or answer it at once with an error.

        lease is (channel, message as the layer holds it in this worker's in-flight set);
        it is released once the request is answered or dropped.
        """
        try:
            request_id = str(message["id"])
            reply = str(message["reply"])
            model, task_name = str(message["model"]), str(message["task"])
            inputs = list(message["inputs"])
            parameters = dict(message.get("parameters") or {})
            deadline = float(message["deadline"])
        except (KeyError, TypeError, ValueError):
            logger.warning("dropped a malformed inference message: %.200r", message)
            self._release(lease)
            return
        now = time.time()
        try:
            if self.draining:
                raise Unavailable("this worker is shutting down")
            slot = self.slots.get(model)
            if slot is None:
                raise Unavailable(f"model {model!r} is not served by this worker")
            if slot.state != "ready":
                detail = f": {slot.error}" if slot.error else ""
                raise Unavailable(f"model {model!r} is {slot.state}{detail}")
            if task_name not in slot.spec.tasks:
                raise Unavailable(f"model {model!r} has no task {task_name!r} on this worker")
            if not inputs or not all(isinstance(i, (str, dict)) for i in inputs):
                raise InvalidInput("inputs must be a non-empty list of strings or question/context objects")
            costs = [slot.loaded.count_tokens(text) for text in inputs]
            self.batcher.submit(
                (model, task_name), request_id, inputs, costs, now, deadline,
                context={"reply": reply, "parameters": parameters, "lease": lease, "tokens": sum(costs)},
            )
        except QueueFull as full:
            self.stats.rejected += 1
            self._reply_error(request_id, reply, Overloaded(
                f"queue of {model}/{task_name} is full ({full.depth}/{full.limit} items); retry later",
                headers={"Retry-After": "1"},
            ), lease)
            return
        except UnknownKey:
            self._reply_error(request_id, reply, Unavailable(f"{model}/{task_name} is not served by this worker"), lease)
            return
        except HostingError as error:
            self._reply_error(request_id, reply, error, lease)
            return
        self._wake.set()

    def ready_models(self) -> list[str]:
        """Models this worker can compute now."""
        return [name for name, slot in self.slots.items() if slot.state == "ready"]

    def room(self) -> int:
        """How many more messages this worker should take now: no hoarding.

        Two batches' worth per task: enough to form the next batch while one computes,
        and the rest stays in Redis for other workers.
        """
        if self.draining:
            return 0
        sizes = [t.policy.max_batch_size for s in self.slots.values() if s.state == "ready" for t in s.spec.tasks.values()]
        limit = max(8, 2 * max(sizes, default=4))
        return max(0, limit - sum(self.batcher.depths().values()))

    async def wait_for_room(self, timeout_s: float) -> None:
        """Until a batch has been taken from the queues (or timeout_s)."""
        self._room.clear()
        try:
            await asyncio.wait_for(self._room.wait(), timeout_s)
        except TimeoutError:
            pass

    # --- the batch loop -----------------------------------------------------------------
    async def run_batches(self) -> None:
        """Form and run batches forever: at once when idle, never two at a time."""
        loop = asyncio.get_running_loop()
        while True:
            now = time.time()
            expired = self.batcher.drop_expired(now)
            self.stats.expired += len(expired)  # their views answer 504 by themselves
            for request in expired:
                self._release(request.context.get("lease"))
            if expired:
                logger.info("dropped %d expired request(s) before compute", len(expired))
            batch = self.batcher.next_batch(now, idle=True)
            if batch is not None:
                self._room.set()
                batch = await self._without_abandoned(batch)
                if not batch.items:
                    continue
            if batch is None:
                wake_at = self.batcher.next_wakeup(now)
                timeout = None if wake_at is None else max(0.0, wake_at - time.time())
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout)
                except TimeoutError:
                    pass
                continue
            self._busy = True
            started = time.time()
            try:
                outputs = await loop.run_in_executor(self._compute, self._run_batch, batch)
            except Exception as error:  # the runner isolates per-input errors; this is a bug guard
                logger.exception("batch on %s failed", batch.key)
                outputs = [ItemFailure(Internal(f"batch failed: {type(error).__name__}"))] * len(batch)
            finally:
                self._busy = False
            compute_s = time.time() - started
            self.stats.batches += 1
            self.stats.items += len(batch)
            logger.debug("batch %s size=%d reason=%s compute=%.1fms", batch.key, len(batch), batch.reason, compute_s * 1e3)
            finished = self.batcher.complete(batch, outputs)
            key = f"{batch.key[0]}/{batch.key[1]}"
            self.stats.completed[key] = self.stats.completed.get(key, 0) + len(batch)
            if finished:
                self._spawn(self._reply_all(finished, started, compute_s))

    async def _without_abandoned(self, batch: Batch) -> Batch:
        """Drop items whose client has gone (timed out, disconnected) before computing them."""
        model, task = batch.key
        now = time.time()
        # Only requests that waited a while can have been abandoned: skip the round trip
        # for fresh ones (a client that left within this window costs one small compute).
        ids = list({item.request.id for item in batch.items if now - item.request.arrival > ABANDON_CHECK_AFTER_S})
        if not ids:
            return batch
        try:
            wanted = await admission.still_wanted(self.layer, model, task, ids)
        except Exception:
            return batch  # broker trouble: compute rather than risk dropping live requests
        if len(wanted) == len(ids):
            return batch
        gone = set(ids) - wanted
        for item in batch.items:
            request = item.request
            if request.id in gone and not request.done:
                request.done = True
                self.stats.dropped += 1
                self._release(request.context.get("lease"))
        kept = [item for item in batch.items if item.request.id not in gone]
        logger.info("dropped %d item(s) of %s/%s: client gone before compute", len(batch.items) - len(kept), model, task)
        batch.items = kept
        return batch

    def _run_batch(self, batch: Batch) -> list[Any]:
        model, task_name = batch.key
        slot = self.slots.get(model)
        if slot is None or slot.loaded is None or task_name not in slot.spec.tasks:
            return [ItemFailure(Unavailable(f"model {model!r} was unloaded"))] * len(batch)
        task = slot.spec.tasks[task_name]
        texts = [item.payload for item in batch.items]
        params = [{**task.parameters, **item.request.context["parameters"]} for item in batch.items]
        return self.runner.run(slot.loaded, task, texts, params)

    # --- replies ------------------------------------------------------------------------
    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._reply_tasks.add(task)
        task.add_done_callback(self._reply_tasks.discard)

    async def _reply_all(self, requests: list[PendingRequest], started: float, compute_s: float) -> None:
        """Answer every request a batch finished: one round trip when the layer can send many."""
        replies = [(r.context["reply"], self._result_message(r, started, compute_s)) for r in requests]
        if hasattr(self.layer, "send_replies"):
            try:
                sent = await self.layer.send_replies(replies)
                if sent < len(replies):
                    logger.warning("%d of %d replies did not fit their channels", len(replies) - sent, len(replies))
            except Exception:  # the views time out with 504; the worker must go on
                logger.exception("could not send %d replies", len(replies))
        else:
            for channel, message in replies:
                await self._send(channel, message)
        for request in requests:
            self._release(request.context.get("lease"))

    def _result_message(self, request: PendingRequest, started: float, compute_s: float) -> dict[str, Any]:
        queue_ms = max(0.0, ((request.started_at or started) - request.arrival) * 1000)
        batch_size = max(request.batch_sizes or [0])
        if request.error is not None:
            error = request.error if isinstance(request.error, HostingError) else Internal(str(request.error))
            return messages.result_message(
                request_id=request.id, error_type=error.error_type, error=error.message,
                queue_ms=queue_ms, compute_ms=compute_s * 1000, batch_size=batch_size, worker=self.worker_id,
            )
        return messages.result_message(
            request_id=request.id, outputs=request.outputs, queue_ms=queue_ms,
            compute_ms=compute_s * 1000, batch_size=batch_size, worker=self.worker_id,
            tokens=request.context.get("tokens", 0),
        )

    def _reply_error(self, request_id: str, reply: str, error: HostingError, lease: tuple[str, bytes] | None = None) -> None:
        message = messages.result_message(request_id=request_id, error_type=error.error_type, error=error.message)
        if "Retry-After" in error.headers:
            message["retry_after"] = error.headers["Retry-After"]
        self._spawn(self._send_then_release(reply, message, lease))

    async def _send_then_release(self, channel: str, message: dict[str, Any], lease: tuple[str, bytes] | None) -> None:
        await self._send(channel, message)
        self._release(lease)

    def _release(self, lease: tuple[str, bytes] | None) -> None:
        """Forget a leased message soon (answered or dropped); one round trip per burst."""
        if lease is None or not hasattr(self.layer, "release"):
            return
        self._to_release.append(lease)
        if self._release_task is None or self._release_task.done():
            self._release_task = asyncio.ensure_future(self._flush_releases())

    async def _flush_releases(self) -> None:
        await asyncio.sleep(0)  # let the other replies of this batch join
        while self._to_release:
            leases, self._to_release = self._to_release, []
            by_channel: dict[str, list[bytes]] = {}
            for channel, member in leases:
                by_channel.setdefault(channel, []).append(member)
            for channel, members in by_channel.items():
                try:
                    await self.layer.release(channel, self.worker_id, members)
                except Exception:
                    logger.exception("could not release %d leases (they will be requeued)", len(members))

    async def _send(self, channel: str, message: dict[str, Any]) -> None:
        try:
            await self.layer.send(channel, message)
        except Exception:  # the view times out with 504; the worker must go on
            logger.exception("could not send the reply for %s", message.get("id"))

    # --- models -------------------------------------------------------------------------
    def wanted(self, spec: ModelSpec) -> bool:
        """Whether this worker should hold the model."""
        if not spec.enabled or not spec.tasks:
            return False
        return not self.serve_models or spec.name in self.serve_models

    async def reconcile(self, specs: dict[str, ModelSpec]) -> None:
        """Bring loaded models and queue settings in line with the registry."""
        for name in list(self.slots):
            spec = specs.get(name)
            slot = self.slots[name]
            if spec is None or not self.wanted(spec) or spec.load_key() != slot.spec.load_key():
                self._unload(name)
            elif spec != slot.spec:
                self._apply_tasks(slot, spec)
        for name, spec in specs.items():
            if self.wanted(spec) and name not in self.slots:
                self.slots[name] = ModelSlot(spec=spec)
                asyncio.ensure_future(self._load(name, spec))

    async def _load(self, name: str, spec: ModelSpec) -> None:
        loop = asyncio.get_running_loop()
        started = time.time()
        try:
            loaded = await loop.run_in_executor(self._loader, self.runner.load, spec)
        except Exception as error:
            logger.exception("loading model %s from %s failed", name, spec.source)
            slot = self.slots.get(name)
            if slot is not None and slot.spec is spec:
                slot.state, slot.error = "error", f"loading {spec.source!r} failed: {type(error).__name__}: {error}"[:2000]
            return
        slot = self.slots.get(name)
        if slot is None or slot.spec.load_key() != spec.load_key():
            return  # unloaded or changed while loading; the next reconcile loads anew
        slot.loaded, slot.state, slot.error = loaded, "ready", ""
        self._apply_tasks(slot, slot.spec)
        logger.info("model %s ready on %s in %.1fs", name, loaded.device, time.time() - started)

    def _apply_tasks(self, slot: ModelSlot, spec: ModelSpec) -> None:
        old_tasks = set(slot.spec.tasks)
        slot.spec = spec
        if slot.state != "ready":
            return
        for task_name in old_tasks - set(spec.tasks):
            self._fail_requests(self.batcher.remove((spec.name, task_name)), f"task {task_name} was removed")
        for task_name, task in spec.tasks.items():
            self.batcher.set_policy((spec.name, task_name), task.policy)
        self._wake.set()

    def _unload(self, name: str) -> None:
        slot = self.slots.pop(name)
        for task_name in slot.spec.tasks:
            self._fail_requests(self.batcher.remove((name, task_name)), f"model {name} was disabled or changed")
        logger.info("model %s unloaded", name)

    def _fail_requests(self, requests: list[PendingRequest], why: str) -> None:
        for request in requests:
            request.done = True
            self._reply_error(request.id, request.context["reply"], Unavailable(why), request.context.get("lease"))

    # --- reporting ----------------------------------------------------------------------
    def models_state(self) -> dict[str, dict[str, Any]]:
        """{model: {state, error, device, tasks, drain_rates, served}} for the heartbeat."""
        rates = self.drain_rates()
        return {
            name: {
                "state": slot.state,
                "error": slot.error,
                "device": getattr(slot.loaded, "device", ""),
                "tasks": list(slot.spec.tasks),
                "drain_rates": {t: rates.get(f"{name}/{t}", 0.0) for t in slot.spec.tasks},
                "served": {t: self.stats.completed.get(f"{name}/{t}", 0) for t in slot.spec.tasks},
            }
            for name, slot in self.slots.items()
        }

    def queue_depths(self) -> dict[str, int]:
        """{"model/task": waiting items} for the heartbeat."""
        return {f"{model}/{task}": depth for (model, task), depth in self.batcher.depths().items()}

    def drain_rates(self) -> dict[str, float]:
        """Items answered per second per "model/task" since the previous call (heartbeat)."""
        now = time.time()
        then, before = self._rate_sample
        if now - then >= 0.5:
            self._rates = {k: (v - before.get(k, 0)) / (now - then) for k, v in self.stats.completed.items()}
            self._rate_sample = (now, dict(self.stats.completed))
        return {k: round(v, 2) for k, v in self._rates.items()}

    def pending(self) -> int:
        """Items waiting or computing, and replies still being sent."""
        return (sum(self.batcher.depths().values()) + (1 if self._busy else 0) + len(self._reply_tasks)
                + len(self._to_release))

    async def drain(self, timeout_s: float) -> None:
        """Stop taking work and wait (bounded) until what is held has been answered."""
        self.draining = True
        deadline = time.time() + timeout_s
        while self.pending() and time.time() < deadline:
            await asyncio.sleep(0.05)

    def shutdown(self) -> None:
        """Release the threads (models die with the process)."""
        self._compute.shutdown(wait=False, cancel_futures=True)
        self._loader.shutdown(wait=False, cancel_futures=True)
