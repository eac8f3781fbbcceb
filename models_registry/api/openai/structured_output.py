"""response_format's grammars compiled off the web's event loop: one small pool, a deadline, one compile per schema.

Why on the web rather than the worker: a schema that cannot be used is a 400 before anything is
charged or queued, the grammar does not depend on the model's tokenizer, and a worker's one compute
thread (shared by every model it serves) only instantiates it (inference.grammar_mask, cached per
tokenizer). Why a thread: llguidance drops the GIL while it compiles (the event loop's longest gap
was 10 ms during a 430 ms compile, measured), and the bounds (tasks.schema_bounds), checked on the
loop before, keep a compile near 0.1 s. One thread per web process, so that hostile schemas take at
most one core's share of a process; at most MAX_PENDING schemas compile or wait at once (more: 503).

A schema's outcome, its grammar or why it cannot be used, is cached by the digest of its canonical
text (what the compile depends on, and all it depends on); requests that send one schema at once share
its one compile. A request waits at most DEADLINE_S, then is a 503 to retry; a compile that itself ran
longer is kept as refused, so the retry is a 400 (a schema within the bounds compiles 20 times faster).
A forced tool call's grammar (api.openai.tool_grammar) is compiled the same way, in a cache of its
own on the same thread, and one that cannot be used is a 400 naming tools.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from models_registry.api.pipeline.error_answers import invalid
from models_registry.api.openai import tool_grammar
from models_registry.core.errors import InvalidInput, Overloaded
from models_registry.tasks import json_grammar
from models_registry.tasks.schema_bounds import SchemaError

THREADS = 1
MAX_PENDING = 8  # distinct schemas compiling or queued in one web process
DEADLINE_S = 2.0  # about 20 times a compile at the bounds on a quiet core
CACHE_ENTRIES = 512
CACHE_BYTES = 32 << 20  # of grammars (a grammar is about the size of its schema's text)
FIELD = "response_format"


@dataclass(frozen=True)
class Outcome:
    """What compiling one schema gave: its grammar, or why it cannot be used."""

    grammar: str | None
    problem: str | None = None


def cache_key(text: str) -> bytes:
    """The cache's key for a schema's canonical text (tasks.schema_bounds.canonical)."""
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


class GrammarCompiles:
    """One process's compiles: the pool, the schemas compiling now, the outcomes kept."""

    def __init__(self, compile: Callable[[str], str] = json_grammar.compile_canonical, threads: int = THREADS,
                 max_pending: int = MAX_PENDING, deadline_s: float = DEADLINE_S,
                 refusal: Callable[[str], InvalidInput] | None = None, pool: ThreadPoolExecutor | None = None) -> None:
        self.compile = compile
        self.max_pending = max_pending
        self.deadline_s = deadline_s
        self.refusal = refusal or refused  # the 400 of a source that cannot be used, naming its field
        self.pool = pool or ThreadPoolExecutor(max_workers=threads, thread_name_prefix="grammar")
        self.compiles = 0  # started, for tests and the curious
        self._lock = threading.Lock()  # the two maps below are written from the pool's thread too
        self._kept: OrderedDict[bytes, Outcome] = OrderedDict()
        self._kept_bytes = 0
        self._running: dict[bytes, Future[Outcome]] = {}

    async def grammar(self, text: str) -> str:
        """The grammar of a schema's canonical text; a 400 naming response_format when it cannot be used."""
        key = cache_key(text)
        with self._lock:
            outcome = self._kept.get(key)
            if outcome is not None:
                self._kept.move_to_end(key)
            future = self._running.get(key) if outcome is None else None
            if outcome is None and future is None:
                if len(self._running) >= self.max_pending:
                    raise Overloaded(f"{len(self._running)} response_format schemas are compiling on this server; "
                                     "send the request again in a moment", headers={"Retry-After": "1"})
                future = self._running[key] = self.pool.submit(self._compiled, key, text)
        if outcome is None:
            assert future is not None
            outcome = await self._awaited(future)
        if outcome.grammar is None:
            raise self.refusal(outcome.problem or "")
        return outcome.grammar

    async def _awaited(self, future: Future[Outcome]) -> Outcome:
        try:  # shielded: a request that stops waiting leaves the compile to finish, for the next one
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), self.deadline_s)
        except TimeoutError:
            raise Overloaded(f"the response_format schema is still compiling after {self.deadline_s:g} s (this "
                             "server is busy with others); send the request again in a moment",
                             headers={"Retry-After": "1"}) from None

    def _compiled(self, key: bytes, text: str) -> Outcome:
        """Compile text in the pool's thread, and keep its outcome."""
        self.compiles += 1
        started = time.perf_counter()
        try:
            outcome = Outcome(self.compile(text))
        except SchemaError as error:
            outcome = Outcome(None, str(error))
        except BaseException:
            with self._lock:
                self._running.pop(key, None)  # not kept: an unexpected failure is a 500, the next one tries again
            raise
        if time.perf_counter() - started > self.deadline_s:
            outcome = Outcome(None, f"it did not compile within {self.deadline_s:g} s: make it smaller")
        with self._lock:
            self._running.pop(key, None)
            self._keep(key, outcome)
        return outcome

    def _keep(self, key: bytes, outcome: Outcome) -> None:
        old = self._kept.pop(key, None)
        self._kept_bytes -= len(old.grammar or old.problem or "") if old is not None else 0
        self._kept[key] = outcome
        self._kept_bytes += len(outcome.grammar or outcome.problem or "")
        while len(self._kept) > CACHE_ENTRIES or self._kept_bytes > CACHE_BYTES:
            _, old = self._kept.popitem(last=False)
            self._kept_bytes -= len(old.grammar or old.problem or "")


def refused(problem: str) -> InvalidInput:
    """The 400 for a schema that cannot be used, naming response_format."""
    return invalid(f"the response_format schema cannot be used for structured output: {problem}", FIELD)


def tools_refused(problem: str) -> InvalidInput:
    """The 400 for tools whose forced call cannot be compiled, naming tools."""
    return invalid(f"the tools' schemas cannot force a call (tool_choice): {problem}", "tools")


COMPILES = GrammarCompiles()
# A forced tool call's grammars (api.openai.tool_grammar): their own cache, the same one thread.
TOOL_COMPILES = GrammarCompiles(tool_grammar.compile_source, refusal=tools_refused, pool=COMPILES.pool)


async def grammar_of(text: str) -> str:
    """The grammar of a schema's canonical text, compiled off the event loop (this process's GrammarCompiles)."""
    return await COMPILES.grammar(text)


async def tool_grammar_of(source: str) -> str:
    """The grammar of a forced call's source (api.openai.tool_grammar.grammar_source), compiled off the loop."""
    return await TOOL_COMPILES.grammar(source)
