"""A cheap closed-loop HTTP/1.1 load client on raw asyncio sockets (keep-alive, no HTTP library)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import numpy as np

Response = tuple[int, bytes, bytes]  # status, raw head, body


class ConnectionBroken(Exception):
    """The server closed the connection before a whole response arrived."""


def _parse(buf: bytearray, until_close: bool = False) -> tuple[int, bytes, bytes, int, bool] | None:
    """(status, head, body, bytes consumed, keep-alive) of the first whole response in buf, or None."""
    head_end = buf.find(b"\r\n\r\n")
    if head_end < 0:
        return None
    head = bytes(buf[:head_end])
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length, chunked, keep_alive = -1, False, not lines[0].startswith(b"HTTP/1.0")
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif name == b"connection":
            keep_alive = value.strip().lower() != b"close"
    start = head_end + 4
    if chunked:
        body, pos = bytearray(), start
        while True:
            line_end = buf.find(b"\r\n", pos)
            if line_end < 0:
                return None
            size = int(bytes(buf[pos:line_end]).split(b";")[0], 16)
            if size == 0:
                trailer_end = buf.find(b"\r\n\r\n", line_end)  # the empty line after any trailers
                if trailer_end < 0:
                    return None
                return status, head, bytes(body), trailer_end + 4, keep_alive
            if len(buf) < line_end + 2 + size + 2:
                return None
            body += buf[line_end + 2:line_end + 2 + size]
            pos = line_end + 2 + size + 2
    if length >= 0:
        if len(buf) < start + length:
            return None
        return status, head, bytes(buf[start:start + length]), start + length, keep_alive
    if status in (204, 304) or 100 <= status < 200:
        return status, head, b"", start, keep_alive
    if until_close:  # no length: the body runs to the end of the connection
        return status, head, bytes(buf[start:]), len(buf), False
    return None


class _Connection(asyncio.Protocol):
    """One keep-alive connection; one request in flight at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[Response] | None = None
        self.open = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.open = True

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._try_finish(False)

    def eof_received(self) -> bool:
        self.open = False
        self._try_finish(True)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        self._try_finish(True)

    def _try_finish(self, closed: bool) -> None:
        if self.waiter is None or self.waiter.done():
            return
        try:
            parsed = _parse(self.buf, until_close=closed)
        except Exception as error:  # garbage from the server
            self.waiter.set_exception(ConnectionBroken(f"unparseable response: {error}"))
            self.open = False
            return
        if parsed is None:
            if closed:
                self.waiter.set_exception(ConnectionBroken("connection closed mid-response"))
            return
        status, head, body, used, keep_alive = parsed
        del self.buf[:used]
        if not keep_alive:
            self.open = False
            if self.transport is not None:
                self.transport.close()
        self.waiter.set_result((status, head, body))

    def send(self, raw: bytes) -> asyncio.Future[Response]:
        """Write one request; a future of (status, head, body)."""
        self.waiter = asyncio.get_running_loop().create_future()
        self.buf.clear()
        assert self.transport is not None
        self.transport.write(raw)
        return self.waiter


class Client:
    """A lazily (re)connecting keep-alive HTTP/1.1 client to one host:port."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.conn: _Connection | None = None

    async def request(self, raw: bytes) -> Response:
        """Send pre-built request bytes, await (status, head, body)."""
        if self.conn is None or not self.conn.open:
            if self.conn is not None and self.conn.transport is not None:
                self.conn.transport.close()
            _, self.conn = await asyncio.get_running_loop().create_connection(_Connection, self.host, self.port)
        return await self.conn.send(raw)

    def close(self) -> None:
        """Close the socket if open."""
        if self.conn is not None and self.conn.transport is not None:
            self.conn.transport.close()
        self.conn = None


def build_request(method: str, base_url: str, path: str, body: bytes = b"", token: str | None = None) -> bytes:
    """The raw bytes of one HTTP/1.1 keep-alive request."""
    parts = urlsplit(base_url)
    head = [f"{method} {path} HTTP/1.1", f"Host: {parts.netloc}", "Connection: keep-alive"]
    if token:
        head.append(f"Authorization: Bearer {token}")
    if body or method in ("POST", "PUT"):
        head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def inference_requests(base_url: str, model: str, token: str, sentences: list[str]) -> list[bytes]:
    """One pre-built `{"inputs": s}` POST per sentence."""
    return [build_request("POST", base_url, f"/models/{model}", json.dumps({"inputs": s}).encode(), token)
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


def check_answers(result: LevelResult, answers: list[Answer], reference: np.ndarray, min_cosine: float = 0.999) -> None:
    """Count errors (non-200) and wrong answers (cosine to the input's own reference too low)."""
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
            vector = np.asarray(json.loads(body), dtype=np.float32).reshape(-1)
            ok = vector.shape == reference[index].shape and float(
                np.dot(vector, reference[index]) / (np.linalg.norm(vector) or 1.0)) > min_cosine
        except (ValueError, TypeError):
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
