"""A tracer of the modules of ours one piece of work passes through, and the rule that keeps that path readable.

Every function of ours entered while the work runs is recorded by module: a *stay* is a run of
calls in one module, a *visit* is a module entered at all, and a *return* is entering a module
the path had left. A module is *left* once none of its calls is still running (a coroutine
waiting on an await still runs) and another module was entered. The rule: no returns, except a
skeleton's calls into its route and the modules first entered from it or under the route (the
route's own helpers): a skeleton is the one place that says the order of the steps. Code made at run time (a dataclass's __init__) is no module's code to read, and is
not counted.

The web's request is one path (its own task and the tasks it awaits), the background work it
starts is listed but is not its path. A worker's work is handed on from task to task (the pull
loop, the batch loop, the reply) and thread (the compute thread): with per_task, each is a path
of its own, held to the same rule.
"""

from __future__ import annotations

import asyncio
import contextvars
import dis
import sys
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any

OURS = ("models_registry.", "hosting.")
TRACING: contextvars.ContextVar[bool] = contextvars.ContextVar("tracing", default=False)


@dataclass
class _Path:
    """One path's state: the calls still running, which modules are the route's helpers, the last module."""

    running: dict[FrameType, str] = field(default_factory=dict)
    route_helpers: dict[str, bool] = field(default_factory=dict)
    last: str = ""
    turn: int = 0  # how many times it restarted (a loop's turns are paths of their own)


class PathTrace:
    """The modules of ours whose functions are entered, in order, and the returns among them.

    traced: whether a call is on the work traced (default: TRACING set in the running context);
    route, skeleton: the route module, and the skeletons (modules) whose calls may come back into
    the modules first entered from them (or under the route); background:
    (module, qualname) of the first call of a task that is not the path; restarts: the calls at
    which a new path starts (a stream's events once the answer is being written; a loop's turn).
    """

    def __init__(self, route: str = "", *, skeleton: Collection[str] = (), background: Collection[tuple[str, str]] = (),
                 restarts: Collection[tuple[str, str]] = (), per_task: bool = False,
                 traced: Callable[[], bool] = TRACING.get) -> None:
        self.route, self.skeletons, self.restarts = route, set(skeleton), set(restarts)
        self.background_calls = set(background)
        self.per_task = per_task
        self.traced = traced
        self.modules: list[str] = []
        self.returns: list[str] = []  # the paths' calls into a module they had left
        self.paths: dict[Any, list[str]] = {}  # per_task: each path's modules, in order, by (task, turn)
        self.path_returns: dict[Any, list[str]] = {}  # per_task: each path's returns
        self._starts: dict[CodeType, int] = {}
        self._yields: dict[CodeType, set[int]] = {}
        self._state: dict[Any, _Path] = {}
        self._background: dict[asyncio.Task[Any] | None, bool] = {None: True}  # a loop callback is background

    def __enter__(self) -> PathTrace:
        sys.setprofile(self.profile)
        return self

    def __exit__(self, *_: object) -> None:
        sys.setprofile(None)

    def profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        """The profile function (sys.setprofile): install it in a thread to trace that thread too."""
        if event not in ("call", "return") or not self.traced():
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(OURS) or frame.f_code.co_filename == "<string>":
            return  # not ours, or made at run time (a dataclass's __init__): no module's code to read
        key = self._key()
        if event == "return":
            if frame.f_lasti not in self._suspensions(frame.f_code):  # done, not waiting on an await
                state = self._state.get(key)
                if state is not None:
                    state.running.pop(frame, None)
            return
        if frame.f_lasti != self._start(frame.f_code):  # a coroutine resuming
            return
        self.modules.append(module)
        if not self.per_task and self._is_background(module, frame.f_code.co_qualname):
            return
        state = self._state.setdefault(key, _Path())
        if (module, frame.f_code.co_qualname) in self.restarts:  # a path of its own starts here
            state.route_helpers, state.last, state.turn = {}, "", state.turn + 1
        if self.per_task:
            self.paths.setdefault((key, state.turn), []).append(module)
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back is not None else ""
        if self._check_return(state, module, caller) and self.per_task:
            self.path_returns.setdefault((key, state.turn), []).append(module)
        state.running[frame] = module

    def _key(self) -> Any:
        """The path a call is on: its task (or thread, outside an event loop) with per_task, else the one path."""
        if not self.per_task:
            return None
        try:
            return asyncio.current_task()
        except RuntimeError:  # a thread without an event loop (the compute thread)
            return threading.get_ident()

    def _is_background(self, module: str, qualname: str) -> bool:
        """Whether the running task is background work (a task's first call of ours says what it is)."""
        try:
            task = asyncio.current_task()
        except RuntimeError:
            task = None
        if task not in self._background:
            self._background[task] = (module, qualname) in self.background_calls
        return self._background[task]

    def _check_return(self, state: _Path, module: str, caller: str) -> bool:
        """Whether entering module (called from caller) is a return on state's path (recorded in returns)."""
        running = set(state.running.values())
        in_route = caller in self.skeletons or (bool(self.route) and (self.route in running or module == self.route))
        returned = False
        if module not in state.route_helpers:
            state.route_helpers[module] = in_route
        elif module not in running and module != state.last and not (in_route and state.route_helpers[module]):
            self.returns.append(module)  # only the skeleton's calls into its route (and the route's helpers) come back
            returned = True
        state.last = module
        return returned

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

    def stays(self, modules: list[str] | None = None) -> list[str]:
        """The modules in order (of one path, or all), a run of calls in one module counted once."""
        modules = self.modules if modules is None else modules
        return [m for i, m in enumerate(modules) if i == 0 or modules[i - 1] != m]


def report(title: str, what: str, modules: list[str], returns: list[str]) -> str:
    """A path's table in Markdown: its stays in order, with the number of calls of each."""
    runs: list[tuple[str, int]] = []
    for module in modules:
        if runs and runs[-1][0] == module:
            runs[-1] = (module, runs[-1][1] + 1)
        else:
            runs.append((module, 1))
    visits = dict.fromkeys(module for module, _ in runs)
    lines = [f"# {title}", "", what, "",
             f"**{len(visits)} modules visited, {len(runs)} stays** ({len(modules)} function calls of ours).", "",
             f"**Returns to a module the path had left: {len(returns)}** "
             f"{', '.join(f'`{m}`' for m in returns) or '(none)'}. A module is left once none of its calls "
             "is still running; a skeleton's calls into its route, and the route's own helpers, may come back.", "",
             "| stay | module | calls |", "|---:|---|---:|"]
    lines += [f"| {n} | `{module}` | {calls} |" for n, (module, calls) in enumerate(runs, 1)]
    return "\n".join(lines) + "\n"


async def call_handler(handler: Callable[..., Any], method: str, path: str, body: bytes,
                       headers: list[tuple[bytes, bytes]]) -> tuple[int, bytes]:
    """One request on an ASGI handler, as uvicorn hands it over (body whole, then no disconnect): status and body."""
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

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
             "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1), "headers": [(b"host", b"127.0.0.1"), *headers]}
    await handler(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
