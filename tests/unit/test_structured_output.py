"""The web's grammar compiles: off the event loop, one per schema, outcomes kept by canonical text, bounded, deadlined."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from models_registry.api.openai.structured_output import GrammarCompiles, cache_key
from models_registry.core.errors import InvalidInput, Overloaded
from models_registry.tasks.schema_bounds import SchemaError, canonical


class Stub:
    """A compile that records what it compiles, in which thread, and can be held until released."""

    def __init__(self, refuse: bool = False) -> None:
        self.texts: list[str] = []
        self.threads: set[str] = set()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self.refuse = refuse

    def __call__(self, text: str) -> str:
        self.texts.append(text)
        self.threads.add(threading.current_thread().name)
        self.entered.set()
        self.release.wait(10)
        if self.refuse:
            raise SchemaError("the stub refuses it")
        return f"grammar of {text}"


def compiles(stub: Callable[[str], str], **options: float) -> GrammarCompiles:
    return GrammarCompiles(compile=stub, **options)  # type: ignore[arg-type]


def test_the_key_is_the_canonical_texts_digest() -> None:
    a = canonical({"type": "object", "properties": {"x": {"type": "integer"}}})
    b = canonical({"properties": {"x": {"type": "integer"}}, "type": "object"})
    assert cache_key(a) == cache_key(b) and len(cache_key(a)) == 16
    assert cache_key(a) != cache_key(canonical({"type": "object", "properties": {"y": {"type": "integer"}}}))


def test_one_schema_compiles_once_in_the_pools_thread_and_is_kept() -> None:
    stub = Stub()
    pool = compiles(stub)
    text = canonical({"type": "object"})

    async def main() -> list[str]:
        stub.release.clear()
        waiting = [asyncio.ensure_future(pool.grammar(text)) for _ in range(5)]  # at once: they share one compile
        await asyncio.to_thread(stub.entered.wait, 10)
        stub.release.set()
        return [*await asyncio.gather(*waiting), await pool.grammar(text)]  # and later: kept

    assert asyncio.run(main()) == [f"grammar of {text}"] * 6
    assert stub.texts == [text] and stub.threads == {"grammar_0"}


def test_a_refusal_is_kept_too() -> None:
    stub = Stub(refuse=True)
    pool = compiles(stub)
    for _ in range(3):
        with pytest.raises(InvalidInput, match="cannot be used for structured output: the stub refuses it") as caught:
            asyncio.run(pool.grammar('{"type":"string"}'))
        assert caught.value.param == "response_format"  # type: ignore[attr-defined]
    assert len(stub.texts) == 1


def test_too_many_schemas_compiling_is_a_503_to_retry() -> None:
    stub = Stub()
    pool = compiles(stub, max_pending=2)

    async def main() -> None:
        stub.release.clear()
        held = [asyncio.ensure_future(pool.grammar(f'{{"const":{i}}}')) for i in range(2)]
        await asyncio.sleep(0)
        with pytest.raises(Overloaded) as caught:
            await pool.grammar('{"const":3}')
        assert caught.value.headers["Retry-After"] == "1"
        stub.release.set()
        await asyncio.gather(*held)
        assert await pool.grammar('{"const":3}') == 'grammar of {"const":3}'  # room again

    asyncio.run(main())


def test_past_the_deadline_a_503_then_the_compile_that_ran_that_long_is_refused() -> None:
    stub = Stub()
    pool = compiles(stub, deadline_s=0.05)
    text = '{"type":"integer"}'

    async def main() -> None:
        stub.release.clear()
        with pytest.raises(Overloaded, match="still compiling after 0.05 s"):
            await pool.grammar(text)  # the stub is held: nothing could finish within the deadline
        stub.release.set()
        await asyncio.to_thread(pool.pool.shutdown)  # the compile has ended and its outcome is kept
        with pytest.raises(InvalidInput, match="did not compile within 0.05 s: make it smaller"):
            await pool.grammar(text)

    asyncio.run(main())
    assert len(stub.texts) == 1


def test_an_unexpected_failure_is_not_kept() -> None:
    calls = []

    def broken(text: str) -> str:
        calls.append(text)
        raise RuntimeError("boom")

    pool = compiles(broken)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            asyncio.run(pool.grammar("{}"))
    assert len(calls) == 2
