"""Closed-loop load levels over bench.http_client: answers, latencies, checks against the in-process reference."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.http_client import Client, ConnectionBroken, build_request


def inference_requests(base_url: str, model: str, token: str, sentences: list[str],
                       traceparent_flags: str | None = None) -> list[bytes]:
    """One pre-built `{"inputs": s}` POST per sentence; with traceparent_flags ("01" sampled, "00" not), each
    carries a W3C traceparent of its own (ids seeded: the same for every run) with those flags."""
    ids = random.Random(20261129)
    return [build_request("POST", base_url, f"/models/{model}", json.dumps({"inputs": s}).encode(), token,
                          None if traceparent_flags is None else
                          {"traceparent": f"00-{ids.getrandbits(128) or 1:032x}-{ids.getrandbits(64) or 1:016x}-"
                                          f"{traceparent_flags}"})
            for s in sentences]


Answer = tuple[int, int, bytes, bytes]  # sentence index, status, raw head, body


@dataclass
class LevelResult:
    """What one closed-loop level produced (answers completed inside the measurement window)."""

    concurrency: int
    window_s: float = 0.0
    window: tuple[float, float] = (0.0, 0.0)  # time.monotonic() bounds, comparable across processes
    latencies_ms: list[float] = field(default_factory=list)
    completed: int = 0
    errors: int = 0
    wrong: int = 0
    checked: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    sample_errors: list[str] = field(default_factory=list)
    server_headers: dict[str, float] = field(default_factory=dict)


async def run_level(base_urls: list[str], requests: dict[str, list[bytes]], concurrency: int,
                    warmup_s: float, seconds: float, max_requests: int, offset: int = 0,
                    on_window: Callable[[str], None] | None = None, drain_s: float = 30.0
                    ) -> tuple[LevelResult, list[Answer]]:
    """Closed loop: each client sends its next request when its previous answer came back.

    Warm-up first (not counted), then a window that ends after `seconds` or `max_requests`
    answers, whichever first; an answer counts when it completes inside the window. Every
    answer in the window, and any failure outside it, is returned for checking afterwards,
    so that checking costs nothing while measuring. on_window("start"/"end") marks the window.
    """
    n = len(next(iter(requests.values())))
    state: dict[str, Any] = {"next": offset, "counted": 0, "stop": False, "start": 0.0, "end": 0.0}
    answers: list[Answer] = []
    result = LevelResult(concurrency=concurrency)
    full = asyncio.Event()
    clock = time.monotonic

    def close_window() -> None:
        state["end"] = clock()
        if on_window:
            on_window("end")
        full.set()

    async def one_client(k: int) -> None:
        url = base_urls[k % len(base_urls)]
        raws = requests[url]
        client = Client(url)
        try:
            while not state["stop"]:
                index = state["next"] % n
                state["next"] += 1
                t0 = clock()
                try:
                    status, head, body = await client.request(raws[index])
                except (OSError, ConnectionBroken) as error:
                    status, head, body = -1, b"", f"{type(error).__name__}: {error}".encode()
                    client.close()
                t1 = clock()
                if state["start"] and not state["end"]:
                    result.latencies_ms.append((t1 - t0) * 1000)
                    answers.append((index, status, head, body))
                    state["counted"] += 1
                    if state["counted"] >= max_requests:
                        close_window()
                elif status != 200:  # a failure outside the window still counts as an error
                    answers.append((index, status, head, body))
        finally:
            client.close()

    tasks = [asyncio.create_task(one_client(k)) for k in range(concurrency)]
    await asyncio.sleep(warmup_s)
    if on_window:
        on_window("start")
    state["start"] = clock()
    try:
        await asyncio.wait_for(full.wait(), timeout=seconds)
    except asyncio.TimeoutError:
        close_window()
    state["stop"] = True
    _, pending = await asyncio.wait(tasks, timeout=drain_s)
    for task in pending:  # answers that never came: errors
        task.cancel()
        result.errors += 1
        result.sample_errors.append("no answer within the drain time")
    result.window = (state["start"], state["end"])
    result.window_s = state["end"] - state["start"]
    result.completed = state["counted"]
    return result, answers


def _header(head: bytes, name: bytes) -> float | None:
    """A numeric response header's value, or None."""
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            try:
                return float(value)
            except ValueError:
                return None
    return None


def check_answers(result: LevelResult, answers: list[Answer], reference: np.ndarray, min_cosine: float = 0.999,
                  extract: Callable[[bytes], Any] = json.loads) -> None:
    """Count errors (non-200) and wrong answers (cosine to the input's own reference too low).

    extract turns a body into the vector (a peer's answer shape differs from ours).
    """
    seen: dict[bytes, list[float]] = {b"x-batch-size": [], b"x-queue-time-ms": [], b"x-inference-time-ms": []}
    for index, status, head, body in answers:
        result.statuses[str(status)] = result.statuses.get(str(status), 0) + 1
        if status != 200:
            result.errors += 1
            if len(result.sample_errors) < 5:
                result.sample_errors.append(f"{status}: {body[:200].decode(errors='replace')}")
            continue
        result.checked += 1
        for name, values in seen.items():
            value = _header(head, name)
            if value is not None:
                values.append(value)
        try:
            vector = np.asarray(extract(body), dtype=np.float32).reshape(-1)
            ok = vector.shape == reference[index].shape and float(
                np.dot(vector, reference[index]) / (np.linalg.norm(vector) or 1.0)) > min_cosine
        except (ValueError, TypeError, KeyError, IndexError):
            ok = False
        if not ok:
            result.wrong += 1
            if len(result.sample_errors) < 5:
                result.sample_errors.append(f"wrong answer for sentence {index}: {body[:120]!r}")
    result.server_headers = {name.decode(): round(float(np.mean(v)), 2) for name, v in seen.items() if v}


async def probe(base_url: str, path: str, interval_s: float, seconds: float) -> list[tuple[float, float, int]]:
    """GET path every interval_s for seconds on one connection: (monotonic start, ms, status) each."""
    client, raw, clock = Client(base_url), build_request("GET", base_url, path), time.monotonic
    samples: list[tuple[float, float, int]] = []
    end = clock() + seconds
    next_at = clock()
    try:
        while clock() < end:
            t0 = clock()
            try:
                status = (await client.request(raw))[0]
            except (OSError, ConnectionBroken):
                status = -1
                client.close()
            samples.append((t0, (clock() - t0) * 1000, status))
            next_at += interval_s
            await asyncio.sleep(max(0.0, next_at - clock()))
    finally:
        client.close()
    return samples


def use_uvloop() -> None:
    """The cheaper event loop when it is installed (it ships with uvicorn[standard])."""
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass


def probe_process(base_url: str, path: str, interval_s: float, seconds: float, out: Any) -> None:
    """Entry of the separate prober process: sends its samples through `out` (a Pipe end)."""
    use_uvloop()
    out.send("ready")
    out.send(asyncio.run(probe(base_url, path, interval_s, seconds)))
    out.close()


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation; nan when empty."""
    return float(np.percentile(values, q)) if values else float("nan")
