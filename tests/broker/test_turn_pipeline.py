"""Scripts called in one loop turn share a pipeline; each caller still gets its own result or error."""

from __future__ import annotations

import asyncio
from typing import Any

from models_registry.broker.layer import HostingChannelLayer
from models_registry.broker.lua import LuaScript
from models_registry.broker.turn_pipeline import TurnPipeline

ECHO = LuaScript("return {KEYS[1], ARGV[1]}")
FAILS = LuaScript("return redis.error_reply('refused ' .. ARGV[1])")


class CountingConnection:
    """The layer's connection, counting the pipelines and plain calls made on it."""

    def __init__(self, conn: Any) -> None:
        self.conn, self.pipelines, self.plain = conn, 0, 0

    def pipeline(self, **kwargs: Any) -> Any:
        self.pipelines += 1
        return self.conn.pipeline(**kwargs)

    async def evalsha(self, *args: Any) -> Any:
        self.plain += 1
        return await self.conn.evalsha(*args)

    async def eval(self, *args: Any) -> Any:
        self.plain += 1
        return await self.conn.eval(*args)


async def test_one_turns_calls_go_in_one_pipeline_with_their_own_results(layer: HostingChannelLayer) -> None:
    conn = CountingConnection(layer.connection(0))
    await ECHO(conn.conn, ["k"], ["load"])  # loaded, as after a first request
    shared = TurnPipeline()
    results = await asyncio.gather(*(shared.call(conn, ECHO, [f"k{i}"], [str(i)]) for i in range(20)))
    assert results == [[f"k{i}".encode(), str(i).encode()] for i in range(20)]
    assert (conn.pipelines, conn.plain) == (1, 0)


async def test_an_error_reaches_only_its_caller(layer: HostingChannelLayer) -> None:
    conn = layer.connection(0)
    await ECHO(conn, ["k"], ["load"])
    shared = TurnPipeline()
    outcomes = await asyncio.gather(shared.call(conn, ECHO, ["a"], ["1"]), shared.call(conn, FAILS, ["b"], ["2"]),
                                    return_exceptions=True)
    assert outcomes[0] == [b"a", b"1"]
    assert isinstance(outcomes[1], Exception) and "refused 2" in str(outcomes[1])


async def test_a_script_the_server_forgot_is_loaded_again(layer: HostingChannelLayer) -> None:
    conn = layer.connection(0)
    await conn.script_flush()
    fresh = LuaScript("return 'fresh ' .. ARGV[1]")
    shared = TurnPipeline()
    assert await asyncio.gather(shared.call(conn, fresh, [], ["a"]), shared.call(conn, fresh, [], ["b"])) == [
        b"fresh a", b"fresh b"]


async def test_a_caller_that_gives_up_harms_no_other(layer: HostingChannelLayer) -> None:
    conn = layer.connection(0)
    shared = TurnPipeline()
    gone = asyncio.ensure_future(shared.call(conn, ECHO, ["x"], ["1"]))
    stays = asyncio.ensure_future(shared.call(conn, ECHO, ["y"], ["2"]))
    await asyncio.sleep(0)
    gone.cancel()
    assert await stays == [b"y", b"2"] and gone.cancelled()


class SilentConnection:
    """A broker that takes every command and never answers."""

    def pipeline(self, **kwargs: Any) -> Any:
        return SilentPipeline()

    async def evalsha(self, *args: Any) -> Any:
        await asyncio.Event().wait()


class SilentPipeline:
    async def __aenter__(self) -> SilentPipeline:
        return self

    async def __aexit__(self, *args: Any) -> None:
        return None

    def evalsha(self, *args: Any) -> None:
        return None

    async def execute(self, **kwargs: Any) -> Any:
        await asyncio.Event().wait()


async def test_a_turn_the_broker_does_not_answer_fails_each_caller_at_the_deadline() -> None:
    shared = TurnPipeline(timeout_s=0.05)
    together = await asyncio.gather(*(shared.call(SilentConnection(), ECHO, ["k"], [str(i)]) for i in range(3)),
                                    return_exceptions=True)
    conn = SilentConnection()
    together += await asyncio.gather(shared.call(conn, ECHO, ["a"], ["1"]), shared.call(conn, ECHO, ["b"], ["2"]),
                                     return_exceptions=True)
    assert [type(outcome) for outcome in together] == [TimeoutError] * 5
