"""One request's path through our modules on every inference route, traced on the real web side.

The handler, the route, the gate, the broker and Redis are production's; a worker stand-in in
the same loop answers through the real layer (pull, send_replies). Every route of the table
(api.route_table: HF, its TGI stream, OpenAI's embeddings, chat and completions, whole and
streamed, TEI's rerank and tokenize) is traced (tests.path_trace) for a request without a token
and for one with a token and its rate limits, and held to the rule that makes the path readable
top to bottom: no returns, except the skeleton's calls into its route (and the route's own
helpers). The tables land in test-artifacts/request-path-<route>*.md; MAX_VISITS guards against
growth. The worker's side: tests/broker/test_worker_path.py; batch-job lines: test_a_job_lines_path.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from models_registry.api.front_door import ApiASGIHandler
from models_registry.broker import admission, messages
from models_registry.broker.work_layer import work_layer
from models_registry.core import paths
from models_registry.core.model_layout import ModelLayout
from models_registry.models import ModelTask, RegisteredModel
from tests import model_factory, path_trace
from tests.path_trace import TRACING, PathTrace

pytestmark = [pytest.mark.django_db(transaction=True)]

ARTIFACT = Path(__file__).resolve().parents[2] / "test-artifacts" / "request-path.md"
LABELS = [[{"label": "POSITIVE", "score": 0.75}]]
VECTOR = b"\x00\x00\x80?" * 4  # [1.0, 1.0, 1.0, 1.0] as float32
# Tasks a request starts and does not wait for, by their first call: the disconnect watch, its places
# given back after the answer (a stream's with its reply channel), and the turn's shared pipeline to Redis
# (loop callbacks are background too).
BACKGROUND = {("models_registry.api.front_door", "ApiASGIHandler._until_disconnect.<locals>.watch"),
              ("models_registry.broker.handoff", "_leave_quietly"),
              ("models_registry.broker.turn_pipeline", "_one"), ("models_registry.broker.turn_pipeline", "_together"),
              ("models_registry.broker.deferred", "DeferredWrites._flush"),
              ("models_registry.broker.stream_handoff", "_release")}
# Modules entered: 37 (no token) on 2026-11-26 before the pipeline; 36 after it, 41 with a token and its limits;
# the usage ledger (issue 36) adds observe.ledger, and broker.deferred where no charge's settle woke it already.
# Issue 37 (every route, 2026-11-27): at most 38 without a token (HF 39: media.item counts the inputs' media once,
# for the charge and the ledger), 43 with one; /tokenize 25 and 33.
# Round six: the HF route asks catalog.sparse_answer whether the answer is a SPLADE model's (one module more).
MAX_VISITS = {False: 41, True: 45}
SKELETON = "models_registry.api.inference_route"
# The front door starts writing the answer: a stream's events, produced after its first byte, are a second path.
ANSWER_WRITTEN = ("models_registry.api.front_door", "send_answer")


def _outputs(task: str, count: int) -> list[Any]:
    """What a worker answers for count inputs of task, on the wire."""
    if task == "feature-extraction":
        return [[VECTOR, [len(VECTOR) // 4]]] * count  # float32 bytes and shape
    if task == "text-ranking":
        return [0.5] * count
    if task == "sparse":  # a SPLADE model's feature-extraction: its non-zero entries
        return [{"indices": np.array([3, 7], dtype="<u4").tobytes(),
                 "values": np.array([0.5, 1.5], dtype="<f4").tobytes()}] * count
    return LABELS * count


async def _worker(layer: Any, model: str, stop: asyncio.Event, streamed: bool = False, task: str = "",
                  worker_sparse: bool = False) -> None:
    """Answers every request on model's channel as a worker does: a leased pull, then for each request one
    send_replies with its places and lease; a streamed one (streamed) gets its token events first."""
    channel = messages.model_channel(model)
    while not stop.is_set():
        pulled = await layer.pull([channel], "w1", 16)
        if not pulled:
            await asyncio.sleep(0.002)
            continue
        for lease, request, _ in pulled:
            count = len(request["inputs"])
            outputs = _outputs("sparse" if worker_sparse else task, count)
            if streamed:
                event = {"index": 1, "token": {"id": 1, "text": "hi", "logprob": 0.0, "special": False},
                         "generated_text": "hi", "details": {"finish_reason": "length", "generated_tokens": 1}}
                await layer.send_replies([(request["reply"],
                                           messages.TokenEvents(request["id"], 0, [event], "w1").to_wire())])
                outputs = [{"generated_text": "hi"}]
            result = messages.WorkResult(id=request["id"], outputs=outputs, batch_size=count, worker="w1")
            places = admission.Places(admission.pending_key(layer, request["model"], request["task"]), request["id"],
                                      count)
            await layer.send_replies([(request["reply"], result.to_wire())], "w1", [lease], [places])


async def _post(handler: ApiASGIHandler, path: str, body: bytes, token: str | None = None) -> tuple[int, bytes]:
    return await path_trace.call_handler(handler, "POST", path, body, [
        (b"content-type", b"application/json"), *([(b"authorization", f"Bearer {token}".encode())] if token else [])])


async def _traced(handler: ApiASGIHandler, path: str, body: bytes, token: str | None,
                  route: str) -> tuple[int, bytes, PathTrace]:
    async def request() -> tuple[int, bytes]:
        TRACING.set(True)
        return await _post(handler, path, body, token)

    with PathTrace(route, skeleton=[SKELETON], background=BACKGROUND, restarts=[ANSWER_WRITTEN]) as trace:
        status, answer = await asyncio.ensure_future(request())  # its own context: the worker's is not traced
    return status, answer, trace


@dataclass(frozen=True)
class RouteCase:
    """One inference route of the table (api.route_table), a model it serves and a body it takes."""

    route: str  # the module of the route (its calls and helpers may come back)
    path: str
    body: dict[str, Any]
    task: str  # the model's pipeline task
    streamed: bool = False  # the worker stand-in answers with token events
    worker: bool = True  # False: the web answers it alone (/tokenize)
    files: dict[str, Any] | None = None  # what the model's files said at registration (ModelTask.file_settings)


API = "models_registry.api."
SPARSE_FILES = ModelLayout(kind="SparseEncoder", modules=("MLMTransformer", "SpladePooling"), transformer_task="fill-mask",
                           normalize=False, splade={"pooling_strategy": "max", "activation_function": "relu"}).to_json()
ROUTES = {
    "hf": RouteCase(API + "hf_route", paths.url_path("model", name="m"), {"inputs": "good"}, "text-classification"),
    "hf-stream": RouteCase(API + "hf_route", paths.url_path("model", name="m"), {"inputs": "say", "stream": True},
                           "text-generation", streamed=True),
    "v1-embeddings": RouteCase(API + "openai_routes", paths.EMBEDDINGS_PATH, {"model": "m", "input": "good"},
                               "feature-extraction"),
    "v1-chat": RouteCase(API + "openai_generation", paths.CHAT_COMPLETIONS_PATH,
                         {"model": "m", "messages": [{"role": "user", "content": "say"}]}, "text-generation",
                         streamed=True),
    "v1-chat-stream": RouteCase(API + "openai_generation", paths.CHAT_COMPLETIONS_PATH,
                                {"model": "m", "messages": [{"role": "user", "content": "say"}], "stream": True},
                                "text-generation", streamed=True),
    "v1-completions": RouteCase(API + "openai_generation", paths.COMPLETIONS_PATH, {"model": "m", "prompt": "say"},
                                "text-generation", streamed=True),
    "tei-rerank": RouteCase(API + "tei_routes", paths.RERANK_PATH, {"model": "m", "query": "q", "texts": ["a", "b"]},
                            "text-ranking"),
    "tei-embed-sparse": RouteCase(API + "sparse_route", paths.EMBED_SPARSE_PATH, {"model": "m", "inputs": "good"},
                                  "feature-extraction", files=SPARSE_FILES),
    "tei-tokenize": RouteCase(API + "tokenize_route", paths.TOKENIZE_PATH, {"model": "m", "inputs": "good"},
                              "feature-extraction", worker=False),
}


def test_every_inference_route_is_traced() -> None:
    """The table above covers every route the front door serves on the bytes (api.route_table)."""
    from models_registry.api import route_table

    traced = {route_table.match(case.path)[0] for case in ROUTES.values()}  # type: ignore[index]
    assert traced == set(route_table._FIXED.values()) | {route_table.match(paths.url_path("model", name="m"))[0]}


@pytest.mark.parametrize("metered", [False, True], ids=["open", "token-and-limits"])
@pytest.mark.parametrize("case", list(ROUTES))
async def test_one_requests_path_stays_short_and_never_goes_back_up(
        broker: str, make_model: Callable[..., RegisteredModel], heartbeat: Callable[..., Any],
        make_token: Callable[..., str], settings: Any, metered: bool, case: str) -> None:
    settings.HOSTING_REQUIRE_API_TOKEN = settings.HOSTING_RATE_LIMITS = metered
    from asgiref.sync import sync_to_async

    route = ROUTES[case]
    model = await sync_to_async(make_model)("m", task=route.task, timeout_s=10.0)
    if route.files is not None:
        await sync_to_async(ModelTask.objects.filter(model=model).update)(file_settings=route.files)
    if not route.worker:  # the web loads the tokenizer itself: the bundled MiniLM's
        await sync_to_async(RegisteredModel.objects.filter(pk=model.pk).update)(
            source=str(model_factory.minilm_path()))
    await sync_to_async(heartbeat)({"m": {"state": "ready", "error": "", "device": "cpu", "tasks": [route.task]}})
    token = await sync_to_async(make_token)("metered", requests_per_minute=100) if metered else None
    layer, stop = work_layer(), asyncio.Event()
    worker = asyncio.ensure_future(_worker(layer, "m", stop, route.streamed, route.task, route.files is not None))
    body = json.dumps(route.body).encode()
    try:
        handler = ApiASGIHandler()  # built once, at start, as the ASGI application is
        warm = await _post(handler, route.path, body, token)
        assert warm[0] == 200, warm  # caches, connections
        status, answer, trace = await _traced(handler, route.path, body, token, route.route)
    finally:
        stop.set()
        await worker
    assert status == 200, answer
    name = f"request-path-{case}{'-metered' if metered else ''}.md"
    ARTIFACT.parent.mkdir(exist_ok=True)
    report = path_trace.report(
        "One request's path through our modules (`tests/django/test_request_path.py`)",
        f"POST {route.path} ({case}{', with a token and its limits' if metered else ''}) on the API handler, "
        "second request (caches warm), a worker answering through the real layer; the background work is listed too.",
        trace.modules, trace.returns)
    ARTIFACT.with_name(name).write_text(report)
    visits = list(dict.fromkeys(trace.stays()))
    assert "models_registry.policy.gate" in visits, report  # the real path
    assert ("models_registry.broker.handoff" in visits or "models_registry.broker.stream_handoff" in visits
            or not route.worker), report
    assert len(visits) <= MAX_VISITS[metered], report
    assert trace.returns == [], report


async def test_the_trace_sees_a_return() -> None:
    """The rule can fail: a module left (its call done, another module entered) and entered again is a return."""
    from models_registry.broker import queue_state
    from models_registry.policy import priority

    async def path() -> None:
        TRACING.set(True)
        queue_state.known_full("m", "t")
        queue_state.known_full("m", "t")  # a call in a row into one module: the same stay
        priority.place("interactive", None, 8, None)
        queue_state.known_full("m", "t")

    with PathTrace("models_registry.api.hf_route", skeleton=[SKELETON]) as trace:
        await asyncio.ensure_future(path())
    assert trace.returns == ["models_registry.broker.queue_state"]
