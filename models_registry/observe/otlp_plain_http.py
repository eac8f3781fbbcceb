"""The OTLP exporter's transport to a collector over plain HTTP: one kept-alive connection, an export one send.

An export runs in the BatchSpanProcessor's thread, which shares the GIL with the requests being served.
Through urllib3 it made eight system calls an export, each a release and a retaking of the GIL (strace):
the pool's liveness poll, a poll before each send and receive, the head and the body sent apart, the
answer's read. Here the head and the body go out with one sendmsg() (no joined copy; the send buffer
holds a batch) and the answer is read by the standard library's http.client.HTTPResponse, whose buffered
file takes it in with one recv(): four calls with the socket timeout's poll() before each. One export of
512 spans cost the export thread 0.23-0.26 ms of CPU this way against 0.38-0.43 through urllib3 (medians
of two side-by-side runs).

It is the SDK's transport plug-in (opentelemetry-exporter-http-transport's BaseHTTPTransport): the
exporter's headers, compression, timeout, retries and Retry-After stay the SDK's own
(opentelemetry.exporter.otlp.common.http). Only http:// endpoints; TLS goes through urllib3
(observe.otlp_transport picks).
"""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import SplitResult, urlsplit

from opentelemetry.exporter.http.transport._base import BaseHTTPResult, BaseHTTPTransport

SEND_BUFFER = 1 << 20  # an export of 512 spans is about 140 kB: sent by one system call, not one per 16 kB


class ConnectTimeout(TimeoutError):
    """The collector did not accept the connection in time (a connection error: retried, as urllib3's is)."""


@dataclass(frozen=True, slots=True)
class PlainHTTPResult(BaseHTTPResult):
    """A request's outcome: the status and reason, with the answer's body and headers; or the error."""

    body: bytes = field(default=b"", repr=False)
    answer_headers: Mapping[str, str] = field(default_factory=http.client.HTTPMessage, repr=False)

    def content(self) -> bytes:
        """The answer's body (de-chunked)."""
        return self.body

    def headers(self) -> Mapping[str, str]:
        """The answer's headers, looked up in any case (http.client's HTTPMessage)."""
        return self.answer_headers


def request_head(method: str, target: SplitResult, headers: Mapping[str, str], length: int) -> bytes:
    """An HTTP/1.1 request's line and headers for the URL target, its body of length bytes, ended by the blank line."""
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


class PlainHTTPTransport(BaseHTTPTransport):
    """HTTP/1.1 over one kept-alive TCP connection (reopened when the collector closed it), for http:// endpoints."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the batch processor exports one at a time; a force_flush may come from another thread
        self._sock: socket.socket | None = None
        self._address: tuple[str, int] | None = None

    def request(self, method: str, url: str, *, headers: dict[str, str] | None = None, timeout: float | None = None,
                data: bytes | None = None) -> BaseHTTPResult:
        """Send one request, read its answer; any failure is the result's error (and drops the connection)."""
        body, target = data or b"", urlsplit(url)
        try:
            if target.scheme != "http" or not target.hostname:
                raise ValueError(f"not a plain http URL: {url}")
            message = (request_head(method, target, headers or {}, len(body)), body)
            with self._lock:
                answer, content = self._exchange((target.hostname, target.port or 80), method, message, timeout)
        except Exception as error:  # noqa: BLE001 - as the SDK's transports: the exporter decides what it means
            self.close()
            return PlainHTTPResult(error=error)
        return PlainHTTPResult(status_code=answer.status, reason=answer.reason, body=content,
                               answer_headers=answer.headers)

    def _exchange(self, address: tuple[str, int], method: str, message: tuple[bytes, bytes],
                  timeout: float | None) -> tuple[http.client.HTTPResponse, bytes]:
        if self._sock is None or self._address != address:
            self._drop()
            self._sock, self._address = _connect(address, timeout), address
        sock = self._sock
        sock.settimeout(timeout)
        send_all(sock, message)
        answer = http.client.HTTPResponse(sock, method=method)  # its own buffered file on the socket
        try:
            answer.begin()
            # http.client reads past a header line without a colon, and to the close past a bad Content-Length
            malformed = answer.headers.defects or (answer.length is None and not answer.chunked
                                                   and "content-length" in answer.headers)
            if malformed:
                raise http.client.HTTPException(f"a malformed answer head: {malformed}")
            content = answer.read()
        finally:
            answer.close()  # the file, not the socket
        if answer.will_close:
            self._drop()
        return answer, content

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
        # An answer cut or not HTTP (http.client's HTTPException) is one, as urllib3's ProtocolError is.
        return isinstance(exception, (ConnectionError, socket.gaierror, http.client.HTTPException))

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
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
    return sock
