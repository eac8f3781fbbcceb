"""One request's path through our modules, traced on the real web side (handler, route, gate, broker, Redis).

A worker stand-in in the same loop answers through the real layer (pull, send_replies), so
the web's side is exactly what production runs. Every function of ours entered while the
request is served is recorded by module: a *stay* is a run of calls in one module, a
*visit* is a module entered at all, and a *return* is entering a module the request had
left (PathTrace says when). The rule that makes the path readable top to bottom: no
returns, except the skeleton's calls into its route (and the route's own helpers), for a
request without a token and for one with a token and its rate limits. The tables land in
test-artifacts/request-path*.md; MAX_VISITS guards against growth.
"""

from __future__ import annotations

import asyncio
import contextvars
import dis
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import pytest

from models_registry.api.front_door import ApiASGIHandler
from models_registry.broker import admission, messages
from models_registry.broker.work_layer import work_layer
from models_registry.models import RegisteredModel

pytestmark = [pytest.mark.django_db(transaction=True)]

ARTIFACT = Path(__file__).resolve().parents[2] / "test-artifacts" / "request-path.md"
OURS = ("models_registry.", "hosting.")
TRACING: contextvars.ContextVar[bool] = contextvars.ContextVar("tracing", default=False)
LABELS = [[{"label": "POSITIVE", "score": 0.75}]]
# Tasks a request starts and does not wait for, by their first call: the disconnect watch, its places
# given back after the answer, and the turn's shared pipeline to Redis (loop callbacks are background too).
BACKGROUND = {("models_registry.api.front_door", "ApiASGIHandler._until_disconnect.<locals>.watch"),
              ("models_registry.broker.handoff", "_leave_quietly"),
              ("models_registry.broker.turn_pipeline", "_one"), ("models_registry.broker.turn_pipeline", "_together"),
              ("models_registry.broker.deferred", "DeferredWrites._flush")}
# Modules entered: 37 (no token) on 2026-11-26 before the pipeline; 36 after it, 41 with a token and its limits;
# the usage ledger (issue 36) adds observe.ledger, and broker.deferred where no charge's settle woke it already.
MAX_VISITS = {False: 38, True: 42}
SKELETON = "models_registry.api.inference_route"
# The front door starts writing the answer: a stream's events, produced after its first byte, are a second path.
ANSWER_WRITTEN = ("models_registry.api.front_door", "send_answer")


class PathTrace:
    """The modules of ours whose functions are entered, in order, while TRACING is set in the running context.

    A module is *left* once none of its calls is still running (a coroutine waiting on an
    await still runs) and another module was entered; entering it again after that is a *return*.
    The skeleton's calls into its route, and the route's own helpers (the modules first entered
    under the route), may come back. A streamed answer's events, produced once the front door
    writes the answer, are a path of their own, held to the same rule.
    Code made at run time (a dataclass's __init__) is no module's code to read, and is not counted. The request's own task
    and the tasks it awaits (asyncio.wait_for runs its awaitable in a task) are held to the
    rule; the background work it starts (BACKGROUND) is listed in the table but is not its path.
    """

    def __init__(self, route: str) -> None:
        self.route = route
        self.modules: list[str] = []
        self.returns: list[str] = []  # the request task's calls into a module it had left
        self._starts: dict[CodeType, int] = {}
        self._yields: dict[CodeType, set[int]] = {}
        self._running: dict[FrameType, str] = {}
        self._route_helpers: dict[str, bool] = {}  # module -> first entered while the route was running
        self._last = ""  # the module of the path's last call (calls in a row into one module are one stay)
        self._background: dict[asyncio.Task[Any] | None, bool] = {None: True}  # a loop callback is background

    def __enter__(self) -> PathTrace:
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *_: object) -> None:
        sys.setprofile(None)

    def _profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event not in ("call", "return") or not TRACING.get():
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(OURS) or frame.f_code.co_filename == "<string>":
            return  # not ours, or made at run time (a dataclass's __init__): no module's code to read
        if event == "return":
            if frame.f_lasti not in self._suspensions(frame.f_code):  # done, not waiting on an await
                self._running.pop(frame, None)
            return
        if frame.f_lasti != self._start(frame.f_code):  # a coroutine resuming
            return
        self.modules.append(module)
        task = asyncio.current_task()
        if task not in self._background:  # a task's first call of ours says what it is
            self._background[task] = (module, frame.f_code.co_qualname) in BACKGROUND
        if not self._background[task]:
            if (module, frame.f_code.co_qualname) == ANSWER_WRITTEN:  # a stream's events: a path of their own
                self._route_helpers, self._last = {}, ""
            caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back is not None else ""
            self._check_return(module, caller)
            self._running[frame] = module

    def _check_return(self, module: str, caller: str) -> None:
        running = set(self._running.values())
        in_route = self.route in running or module == self.route or caller == SKELETON
        if module not in self._route_helpers:
            self._route_helpers[module] = in_route
        elif module not in running and module != self._last and not (in_route and self._route_helpers[module]):
            self.returns.append(module)  # only the skeleton's calls into its route (and the route's own helpers) may come back
        self._last = module

    def _start(self, code: CodeType) -> int:
        """Where a call of code begins: its first RESUME (a coroutine resuming is at a later one)."""
        if code not in self._starts:
            self._starts[code] = next(i.offset for i in dis.get_instructions(code) if i.opname == "RESUME")
        return self._starts[code]

    def _suspensions(self, code: CodeType) -> set[int]:
        """Where a coroutine or generator of code waits (its 'return' event there is a suspension)."""
        if code not in self._yields:
            self._yields[code] = {i.offset for i in dis.get_instructions(code) if i.opname == "YIELD_VALUE"}
        return self._yields[code]

    def stays(self) -> list[str]:
        """The modules in order, a run of calls in one module counted once."""
        return [m for i, m in enumerate(self.modules) if i == 0 or self.modules[i - 1] != m]


async def _worker(layer: Any, model: str, stop: asyncio.Event, streamed: bool = False) -> None:
    """Answers every request on model's channel as a worker does: a leased pull, then for each request one
    send_replies with its places and lease; a streamed one (streamed) gets its token events first."""
    channel = messages.model_channel(model)
    while not stop.is_set():
        pulled = await layer.pull(channel, "w1", 16)
        if not pulled:
            await asyncio.sleep(0.002)
            continue
        for lease, request in pulled:
            count = len(request["inputs"])
            outputs = LABELS * count
            if streamed:
                event = {"index": 1, "token": {"id": 1, "text": "hi", "logprob": 0.0, "special": False},
                         "generated_text": "hi", "details": {"finish_reason": "length", "generated_tokens": 1}}
                await layer.send_replies([(request["reply"],
                                           messages.TokenEvents(request["id"], 0, [event], "w1").to_wire())])
                outputs = [{"generated_text": "hi"}]
            result = messages.WorkResult(id=request["id"], outputs=outputs, batch_size=count, worker="w1")
            places = admission.Places(admission.pending_key(layer, request["model"], request["task"]), request["id"],
                                      count)
            await layer.send_replies([(request["reply"], result.to_wire())], "w1", [(channel, lease)], [places])


async def _post(handler: ApiASGIHandler, path: str, body: bytes, token: str | None = None) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []
    given = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if not given.is_set():
            given.set()
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"", "server": ("127.0.0.1", 80),
             "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                         *([(b"authorization", f"Bearer {token}".encode())] if token else [])],
             "client": ("127.0.0.1", 1)}
    await handler(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


async def _traced(handler: ApiASGIHandler, path: str, body: bytes,
                  token: str | None) -> tuple[int, bytes, PathTrace]:
    async def request() -> tuple[int, bytes]:
        TRACING.set(True)
        return await _post(handler, path, body, token)

    with PathTrace("models_registry.api.hf_route") as trace:
        status, answer = await asyncio.ensure_future(request())  # its own context: the worker's is not traced
    return status, answer, trace


def _report(trace: PathTrace) -> str:
    runs: list[tuple[str, int]] = []
    for module in trace.modules:
        if runs and runs[-1][0] == module:
            runs[-1] = (module, runs[-1][1] + 1)
        else:
            runs.append((module, 1))
    visits = dict.fromkeys(module for module, _ in runs)
    lines = ["# One request's path through our modules (`tests/django/test_request_path.py`)", "",
             "POST /models/<name> on the API handler, second request (caches warm), a worker answering through "
             "the real layer.", "",
             f"**{len(visits)} modules visited, {len(runs)} stays** ({len(trace.modules)} function calls of ours, "
             "the background work listed too).", "",
             f"**Returns to a module the request had left: {len(trace.returns)}** "
             f"{', '.join(f'`{m}`' for m in trace.returns) or '(none)'}. A module is left once none of its calls "
             "is still running; the skeleton's calls into its route, and the route's own helpers, may come back.", "", "| stay | module | calls |", "|---:|---|---:|"]
    lines += [f"| {n} | `{module}` | {calls} |" for n, (module, calls) in enumerate(runs, 1)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("metered", [False, True], ids=["open", "token-and-limits"])
async def test_one_requests_path_stays_short_and_never_goes_back_up(
        broker: str, make_model: Callable[..., RegisteredModel], heartbeat: Callable[..., Any],
        make_token: Callable[..., str], settings: Any, metered: bool) -> None:
    settings.HOSTING_REQUIRE_API_TOKEN = settings.HOSTING_RATE_LIMITS = metered
    from asgiref.sync import sync_to_async

    await sync_to_async(make_model)("cls", task="text-classification", timeout_s=10.0)
    await sync_to_async(heartbeat)({"cls": {"state": "ready", "error": "", "device": "cpu",
                                            "tasks": ["text-classification"]}})
    token = await sync_to_async(make_token)("metered", requests_per_minute=100) if metered else None
    layer, stop = work_layer(), asyncio.Event()
    worker = asyncio.ensure_future(_worker(layer, "cls", stop))
    try:
        handler = ApiASGIHandler()  # built once, at start, as the ASGI application is
        assert (await _post(handler, "/models/cls", b'{"inputs": "warm"}', token))[0] == 200  # caches, connections
        status, answer, trace = await _traced(handler, "/models/cls", b'{"inputs": "good"}', token)
    finally:
        stop.set()
        await worker
    assert status == 200 and json.loads(answer) == LABELS
    ARTIFACT.parent.mkdir(exist_ok=True)
    (ARTIFACT.with_name("request-path-metered.md") if metered else ARTIFACT).write_text(_report(trace))
    stays = trace.stays()
    visits = list(dict.fromkeys(stays))
    assert "models_registry.policy.gate" in visits and "models_registry.broker.handoff" in visits  # the real path
    assert len(visits) <= MAX_VISITS[metered], _report(trace)
    assert trace.returns == [], _report(trace)


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

    with PathTrace("models_registry.api.hf_route") as trace:
        await asyncio.ensure_future(path())
    assert trace.returns == ["models_registry.broker.queue_state"]


async def test_a_streamed_requests_path(
        broker: str, make_model: Callable[..., RegisteredModel], heartbeat: Callable[..., Any], settings: Any) -> None:
    settings.HOSTING_REQUIRE_API_TOKEN = settings.HOSTING_RATE_LIMITS = False
    from asgiref.sync import sync_to_async

    await sync_to_async(make_model)("gen", task="text-generation", timeout_s=10.0)
    await sync_to_async(heartbeat)({"gen": {"state": "ready", "error": "", "device": "cpu",
                                            "tasks": ["text-generation"]}})
    layer, stop = work_layer(), asyncio.Event()
    worker = asyncio.ensure_future(_worker(layer, "gen", stop, streamed=True))
    body = b'{"inputs": "say", "stream": true}'
    try:
        handler = ApiASGIHandler()
        assert (await _post(handler, "/models/gen", body))[0] == 200
        status, answer, trace = await _traced(handler, "/models/gen", body, None)
    finally:
        stop.set()
        await worker
    assert status == 200 and b'"generated_text":"hi"' in answer, answer
    ARTIFACT.with_name("request-path-stream.md").write_text(_report(trace))
    assert trace.returns == [], _report(trace)
