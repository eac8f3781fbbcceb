"""Scripts called in one turn of the event loop go to Redis together: one pipeline, one write, one read.

Under load a web process starts dozens of requests per turn, and each used to send its
enqueue script on a connection of its own: a write, a read and a connection checkout each.
Here the calls of a turn wait until the turn ends (one loop iteration, microseconds) and
leave in one pipeline per server; each caller gets its own script's result or error. A
lone request pays one extra loop iteration and nothing else. A turn's calls share one
deadline too: a broker that does not answer them within timeout_s fails each with
TimeoutError (one timer per turn, not one per request).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from redis.exceptions import NoScriptError

from models_registry.broker.lua import LuaScript


@dataclass
class _Call:
    script: LuaScript
    keys: list[Any]
    args: list[Any]
    result: asyncio.Future[Any]


class TurnPipeline:
    """Collects script calls per connection and sends each turn's in one pipeline (within timeout_s; None: no limit)."""

    def __init__(self, timeout_s: float | None = None) -> None:
        self.timeout_s = timeout_s
        self._calls: dict[int, tuple[Any, list[_Call]]] = {}
        self._flush: asyncio.Handle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def call(self, conn: Any, script: LuaScript, keys: list[Any], args: list[Any]) -> Any:
        """script(keys, args) on conn, sent with the rest of this turn's calls."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new loop (tests run one per test): nothing of an old one is pending here
            self._calls, self._flush, self._loop = {}, None, loop
        call = _Call(script, keys, args, loop.create_future())
        self._calls.setdefault(id(conn), (conn, []))[1].append(call)
        if self._flush is None:
            self._flush = loop.call_soon(self._send_all)
        return await call.result

    def _send_all(self) -> None:
        self._flush = None
        batches, self._calls = self._calls, {}
        for conn, calls in batches.values():
            if len(calls) == 1:  # nothing to share: a plain call
                task = asyncio.ensure_future(_one(conn, calls[0], self.timeout_s))
            else:
                task = asyncio.ensure_future(_together(conn, calls, self.timeout_s))
            _running.add(task)
            task.add_done_callback(_running.discard)


_running: set[asyncio.Task[None]] = set()


async def _one(conn: Any, call: _Call, timeout_s: float | None) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            result = await call.script(conn, call.keys, call.args)
    except BaseException as error:  # noqa: BLE001 - every error is the caller's to handle
        _fail(call, error)
    else:
        _settle(call, result)


async def _together(conn: Any, calls: list[_Call], timeout_s: float | None) -> None:
    try:
        async with asyncio.timeout(timeout_s), conn.pipeline(transaction=False) as pipe:
            for call in calls:
                pipe.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)
            results = await pipe.execute(raise_on_error=False)
    except BaseException as error:  # noqa: BLE001 - the connection failed or timed out: every caller hears it
        for call in calls:
            _fail(call, error)
        return
    for call, result in zip(calls, results, strict=True):
        if isinstance(result, NoScriptError):  # a restarted Redis: this call loads the script
            await _one(conn, call, timeout_s)
        elif isinstance(result, Exception):
            _fail(call, result)
        else:
            _settle(call, result)


def _settle(call: _Call, result: Any) -> None:
    if not call.result.done():  # a caller that gave up (timed out, cancelled) wants nothing
        call.result.set_result(result)


def _fail(call: _Call, error: BaseException) -> None:
    if not call.result.done():
        if isinstance(error, asyncio.CancelledError):
            call.result.cancel()
        else:
            call.result.set_exception(error)


shared = TurnPipeline(timeout_s=1.0)  # a broker that does not answer within a second is down (broker.handoff)
