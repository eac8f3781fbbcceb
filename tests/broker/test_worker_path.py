"""The worker's side of one request, traced as the web's is (tests/django/test_request_path.py).

The real pull loop (worker.pull_loop), engine, intake, batcher, batch loop, compute thread and
replies, on a real Redis, with the test's stand-in runner in place of a model (inference/ is
the model's side, tested apart). A request is handed on from task to task (pull -> intake and
batcher; batch loop -> compute thread -> replies) and each loop's turn, each task and the
compute thread is a path of its own (tests.path_trace), held to the same rule: no returns but
a skeleton's (SKELETONS) calls; so is a request intake refuses, and its error's answer. The
tables land in test-artifacts/worker-path.md and worker-path-refused.md.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from pathlib import Path
from typing import Any

from models_registry.broker import handoff
from models_registry.broker.layer import HostingChannelLayer
from models_registry.capacity.memory_budget import MemoryConfig
from models_registry.core.errors import HostingError, Unavailable
from models_registry.worker.engine import InferenceEngine
from models_registry.worker.pull_loop import PullLoop
from tests import path_trace
from tests.broker.test_engine import Runner, spec, until
from tests.path_trace import PathTrace

ARTIFACT = Path(__file__).resolve().parents[2] / "test-artifacts" / "worker-path.md"
# A loop's turn is a path of its own: the pull loop's starts when it measures its room (and the ready models'
# channels), the batch loop's when it drops the expired requests before forming the next batch.
TURNS = {("models_registry.worker.pull_loop", "PullLoop.room"),
         ("models_registry.worker.batcher", "Batcher.drop_expired")}
# The worker's skeletons, each the one place that says the order of its steps (as the web's route skeleton):
# the pull loop's turn, the batch loop's turn (and its compute thread), the reply of a batch.
SKELETONS = ("models_registry.worker.pull_loop", "models_registry.worker.batch_loop", "models_registry.worker.replies")
# What shows each stage's path: the pull loop's turn (the leased pull, intake, the batcher's queue), the batch
# loop's turn, the compute thread (the model's run) and the reply.
STAGES = {"pull": {"models_registry.worker.pull_loop", "models_registry.broker.layer", "models_registry.worker.intake",
                   "models_registry.worker.batcher"},
          "batch": {"models_registry.worker.batch_loop", "models_registry.worker.batcher",
                    "models_registry.worker.replies"},
          "run": {"models_registry.capacity.batch_memory"},
          "reply": {"models_registry.worker.replies", "models_registry.broker.layer"}}
SENDER: contextvars.ContextVar[bool] = contextvars.ContextVar("sender", default=False)  # the web's side: not traced


def _web_side(layer: HostingChannelLayer) -> bool:
    """Whether the running call is the web's: its hand-off's task, or the layer's reply pump (in a context of its own,
    so not the hand-off's)."""
    if SENDER.get():
        return True
    try:
        return asyncio.current_task() is layer._pump
    except RuntimeError:  # the compute thread: no event loop, the worker's
        return False


async def _send(text: str, task: str = "t") -> handoff.InferenceResult | HostingError:
    """The web's hand-off of one request to model m, in a task of its own (its calls are not traced): its answer."""

    async def send() -> handoff.InferenceResult | HostingError:
        SENDER.set(True)
        try:
            return await handoff.infer(request_id=text, model="m", task=task, inputs=[text], parameters={},
                                       timeout_s=10, max_queue_size=100)
        except HostingError as error:
            return error

    return await asyncio.ensure_future(send())


async def _traced(layer: HostingChannelLayer, text: str, task: str = "t"
                  ) -> tuple[handoff.InferenceResult | HostingError, PathTrace, list[str]]:
    """The web's answer to text for model m's task, the worker's side of it traced (once warm), and its tables."""
    engine = InferenceEngine(layer, Runner(), memory=MemoryConfig(cap_batches=False))
    await engine.reconcile({"m": spec()})
    await until(lambda: engine.ready_models() == ["m"])
    tracing = False
    loops = [asyncio.ensure_future(PullLoop(layer, engine).run()), asyncio.ensure_future(engine.run_batches())]
    compute = engine.batch_loop._compute  # the compute thread: traced too, once the trace is installed there
    loop = asyncio.get_running_loop()
    try:
        assert await _send("warm", task) is not None  # the compute thread, connections, caches
        trace = PathTrace(per_task=True, skeleton=SKELETONS, restarts=TURNS,
                          traced=lambda: tracing and not _web_side(layer))
        with trace:
            await loop.run_in_executor(compute, sys.setprofile, trace.profile)
            tracing = True
            answer = await _send(text, task)
            await until(lambda: engine.replies.pending() == 0)  # the reply's task and the lease's release ended
            tracing = False
            await loop.run_in_executor(compute, sys.setprofile, None)
    finally:
        for task_ in loops:
            task_.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        engine.shutdown()
    tables = [path_trace.report(f"Worker path {n}", f"The worker's side of one request for task {task} "
                                "(tests/broker/test_worker_path.py).", modules, trace.path_returns.get(key, []))
              for n, (key, modules) in enumerate(trace.paths.items(), 1)]
    return answer, trace, tables


def _returns(trace: PathTrace) -> list[str]:
    """Every path's returns (a module it had left, entered again), in order."""
    return [m for key in trace.paths for m in trace.path_returns.get(key, [])]


async def test_the_worker_side_of_one_request_never_goes_back_up(layer: HostingChannelLayer,
                                                                 monkeypatch: Any) -> None:
    monkeypatch.setattr(handoff, "work_layer", lambda: layer)
    answer, trace, tables = await _traced(layer, "good")
    assert isinstance(answer, handoff.InferenceResult) and answer.outputs == ["GOOD"], answer
    ARTIFACT.parent.mkdir(exist_ok=True)
    ARTIFACT.write_text("\n".join(tables))
    found = {name: [key for key, modules in trace.paths.items() if sign <= set(modules)] for name, sign in STAGES.items()}
    assert all(found.values()), (found, tables)  # every stage of the worker's side is on a traced path
    assert _returns(trace) == [], "\n".join(tables)


async def test_a_refused_requests_turn_and_its_error_answer_never_go_back_up(layer: HostingChannelLayer,
                                                                             monkeypatch: Any) -> None:
    monkeypatch.setattr(handoff, "work_layer", lambda: layer)
    answer, trace, tables = await _traced(layer, "refused", task="nope")  # intake refuses it: m has no task nope
    assert isinstance(answer, Unavailable) and "has no task 'nope'" in answer.message, answer
    ARTIFACT.parent.mkdir(exist_ok=True)
    ARTIFACT.with_name("worker-path-refused.md").write_text("\n".join(tables))
    refused = [key for key, modules in trace.paths.items()
               if {"models_registry.worker.pull_loop", "models_registry.worker.intake",
                   "models_registry.worker.replies"} <= set(modules)]
    answered = [key for key, modules in trace.paths.items()
                if {"models_registry.worker.replies", "models_registry.broker.messages",
                    "models_registry.broker.layer"} <= set(modules)]
    assert refused and answered, tables  # the turn that refused it, and the task that sent its error
    assert _returns(trace) == [], "\n".join(tables)
