"""The OTLP exporter's transport to a collector over plain HTTP: one kept-alive connection, an export one send.

An export runs in the BatchSpanProcessor's thread, which shares the GIL with the requests being served.
Through urllib3 an export of 512 spans cost that thread 0.49 ms of CPU (median; 0.27 ms here, measured side
by side) and eight system calls, each a release and a retaking of the GIL (strace): the pool's
liveness poll, a poll before each send and receive, the head and the body sent apart, the answer read
through a buffered file. Here the head and the body go out with one sendmsg() (no joined copy; the send
buffer holds a batch), the answer comes in with one recv() (it fits one segment) and is parsed in a few
lines; the timeouts are the kernel's (SO_SNDTIMEO, SO_RCVTIMEO), so no poll() precedes either call.

It is the SDK's transport plug-in (opentelemetry-exporter-http-transport's BaseHTTPTransport): the
exporter's headers, compression, timeout, retries and Retry-After stay the SDK's own
(opentelemetry.exporter.otlp.common.http). Only http:// endpoints; TLS goes through urllib3
(observe.otlp_transport picks).
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.exporter.http.transport._base import BaseHTTPResult, BaseHTTPTransport

SEND_BUFFER = 1 << 20  # an export of 512 spans is about 140 kB: sent by one system call, not one per 16 kB
_READ = 1 << 16
_MAX_HEAD = 1 << 16  # a collector's status line and headers: never unbounded
_NO_BODY = frozenset({204, 304})


class ConnectTimeout(TimeoutError):
    """The collector did not accept the connection in time (a connection error: retried, as urllib3's is)."""


class ProtocolError(ConnectionError):
    """The answer was not HTTP/1.x, or the connection closed before it was whole (the connection is dropped)."""


class _Headers(dict):  # type: ignore[type-arg]
    """An answer's headers by lower-cased name: looked up in any case, as the SDK reads Retry-After."""

    def get(self, key: Any, default: Any = None) -> Any:
        return super().get(key.lower() if isinstance(key, str) else key, default)

    def __getitem__(self, key: Any) -> Any:
        return super().__getitem__(key.lower() if isinstance(key, str) else key)

    def __contains__(self, key: object) -> bool:
        return super().__contains__(key.lower() if isinstance(key, str) else key)


@dataclass(frozen=True, slots=True)
class PlainHTTPResult(BaseHTTPResult):
    """A request's outcome: the status and reason, with the answer's body and headers; or the error."""

    body: bytes = field(default=b"", repr=False)
    answer_headers: Mapping[str, str] = field(default_factory=_Headers, repr=False)

    def content(self) -> bytes:
        """The answer's body (de-chunked)."""
        return self.body

    def headers(self) -> Mapping[str, str]:
        """The answer's headers, looked up in any case."""
        return self.answer_headers


def request_head(method: str, url: str, headers: Mapping[str, str], length: int) -> bytes:
    """An HTTP/1.1 request's line and headers for url, its body of length bytes, ended by the blank line."""
    target = urlsplit(url)
    path = (target.path or "/") + (f"?{target.query}" if target.query else "")
    lines = [f"{method} {path} HTTP/1.1", f"Host: {target.netloc}"]
    for name, value in headers.items():
        if name.lower() in ("host", "content-length", "transfer-encoding", "connection"):
            continue  # this transport's own
        if any(c in f"{name}{value}" for c in "\r\n\0"):  # a header split into two is another request
            raise ValueError(f"header {name!r} has a line break")
        lines.append(f"{name}: {value}")
    lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


@dataclass
class Answer:
    """A parsed answer: its status, reason, headers, body, and whether the connection can carry another request."""

    status: int
    reason: str
    headers: _Headers
    body: bytes
    keep_alive: bool


def parse_head(head: bytes) -> tuple[int, str, _Headers, bool]:
    """(status, reason, headers, HTTP/1.1 or later) of an answer's head (without its blank line)."""
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
        raise ProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    headers = _Headers()
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise ProtocolError(f"a header line without a colon: {line[:80]!r}")
        name = name.strip().lower()
        headers[name] = f"{headers[name]}, {value.strip()}" if name in headers else value.strip()
    return int(code), reason, headers, version != "HTTP/1.0"


class _Reader:
    """Bytes of one connection's answers, received in as few calls as they come."""

    def __init__(self, sock: socket.socket, buffered: bytes = b"") -> None:
        self.sock, self.buffer = sock, bytearray(buffered)

    def fill(self) -> bool:
        """Receive more; False when the peer closed."""
        data = self.sock.recv(_READ)
        self.buffer += data
        return bool(data)

    def until(self, marker: bytes, most: int) -> bytes:
        """The bytes before marker (consumed with it)."""
        while (at := self.buffer.find(marker)) < 0:
            if len(self.buffer) > most:
                raise ProtocolError(f"no {marker!r} within {most} bytes")
            if not self.fill():
                raise ProtocolError("connection closed before the answer was whole")
        found = bytes(self.buffer[:at])
        del self.buffer[:at + len(marker)]
        return found

    def exactly(self, count: int) -> bytes:
        """The next count bytes."""
        while len(self.buffer) < count:
            if not self.fill():
                raise ProtocolError("connection closed before the answer was whole")
        found = bytes(self.buffer[:count])
        del self.buffer[:count]
        return found

    def rest(self) -> bytes:
        """Everything until the peer closes."""
        while self.fill():
            pass
        found = bytes(self.buffer)
        self.buffer.clear()
        return found


def read_answer(reader: _Reader, method: str) -> Answer:
    """The next final answer on a connection (interim 1xx ones skipped), its body by Content-Length, chunks or close."""
    while True:
        status, reason, headers, persistent = parse_head(reader.until(b"\r\n\r\n", _MAX_HEAD))
        if status >= 200 or status == 101:
            break
    keep_alive = persistent and "close" not in headers.get("connection", "").lower()
    if method == "HEAD" or status in _NO_BODY or status < 200:
        return Answer(status, reason, headers, b"", keep_alive)
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks = []
        while size := int(reader.until(b"\r\n", _MAX_HEAD).split(b";")[0].strip() or b"0", 16):
            chunks.append(reader.exactly(size))
            reader.exactly(2)  # the chunk's CRLF
        while reader.until(b"\r\n", _MAX_HEAD):  # trailers, up to the blank line
            pass
        return Answer(status, reason, headers, b"".join(chunks), keep_alive)
    if "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            raise ProtocolError(f"Content-Length {headers['content-length']!r}") from None
        return Answer(status, reason, headers, reader.exactly(length), keep_alive)
    return Answer(status, reason, headers, reader.rest(), False)  # delimited by the close


class PlainHTTPTransport(BaseHTTPTransport):
    """HTTP/1.1 over one kept-alive TCP connection (reopened when the collector closed it), for http:// endpoints."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the batch processor exports one at a time; a force_flush may come from another thread
        self._sock: socket.socket | None = None
        self._address: tuple[str, int] | None = None

    def request(self, method: str, url: str, *, headers: dict[str, str] | None = None, timeout: float | None = None,
                data: bytes | None = None) -> BaseHTTPResult:
        """Send one request, read its answer; any failure is the result's error (and drops the connection)."""
        body = data or b""
        try:
            message = (request_head(method, url, headers or {}, len(body)), body)
            with self._lock:
                answer = self._exchange(urlsplit(url), method, message, timeout)
        except Exception as error:  # noqa: BLE001 - as the SDK's transports: the exporter decides what it means
            self.close()
            return PlainHTTPResult(error=error)
        return PlainHTTPResult(status_code=answer.status, reason=answer.reason, body=answer.body,
                               answer_headers=answer.headers)

    def _exchange(self, target: Any, method: str, message: tuple[bytes, bytes], timeout: float | None) -> Answer:
        if target.scheme != "http" or not target.hostname:
            raise ValueError(f"not a plain http URL: {target.geturl()}")
        address = (target.hostname, target.port or 80)
        if self._sock is None or self._address != address:
            self._drop()
            self._sock, self._address = _connect(address, timeout), address
        sock = self._sock
        _set_timeout(sock, timeout)
        try:
            send_all(sock, message)
            answer = read_answer(_Reader(sock), method)
        except BlockingIOError as error:  # SO_SNDTIMEO or SO_RCVTIMEO ran out
            raise TimeoutError(f"no answer from {address[0]}:{address[1]} within {timeout} s") from error
        if not answer.keep_alive:
            self._drop()
        return answer

    def _drop(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def is_connection_error(self, exception: Exception | None) -> bool:
        """Whether the request failed to reach the collector or lost its connection (the exporter retries it)."""
        if isinstance(exception, TimeoutError):
            return isinstance(exception, ConnectTimeout)  # a read timeout is not retried, as urllib3's
        return isinstance(exception, (ConnectionError, socket.gaierror))

    def close(self) -> None:
        """Close the connection (the next request opens another)."""
        with self._lock:
            self._drop()


def send_all(sock: socket.socket, parts: tuple[bytes, ...]) -> None:
    """Send parts in order as one stream, gathered by the kernel (sendmsg: no joined copy of the body), in as few
    calls as the send buffer allows: one for an export."""
    views = [memoryview(part) for part in parts if part]
    while views:
        sent = sock.sendmsg(views)
        while views and sent >= len(views[0]):
            sent -= len(views.pop(0))
        if sent:
            views[0] = views[0][sent:]


def _connect(address: tuple[str, int], timeout: float | None) -> socket.socket:
    """A connection to the collector, its send buffer able to take an export at once, Nagle off (one segment)."""
    try:
        sock = socket.create_connection(address, timeout=timeout)
    except TimeoutError as error:
        raise ConnectTimeout(f"connecting to {address[0]}:{address[1]}: {error}") from error
    sock.settimeout(None)  # blocking: the timeout is the kernel's (_set_timeout), no poll() before each call
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
    return sock


def _set_timeout(sock: socket.socket, timeout: float | None) -> None:
    """Bound each send and receive by timeout seconds (None: no bound) in the kernel (SO_SNDTIMEO, SO_RCVTIMEO).

    A Python socket timeout would poll() before every call: one more release and retaking of the GIL each.
    """
    micros = 0 if timeout is None else max(1, round(timeout * 1_000_000))  # a zero timeval means no bound
    value = struct.pack("ll", *divmod(micros, 1_000_000))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
