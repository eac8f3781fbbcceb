"""A cheap keep-alive HTTP/1.1 client on raw asyncio sockets (no HTTP library): pre-built requests in, (status, head, body) out."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

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


def build_request(method: str, base_url: str, path: str, body: bytes = b"", token: str | None = None,
                  headers: dict[str, str] | None = None) -> bytes:
    """The raw bytes of one HTTP/1.1 keep-alive request (headers: more of them, e.g. a traceparent)."""
    parts = urlsplit(base_url)
    head = [f"{method} {path} HTTP/1.1", f"Host: {parts.netloc}", "Connection: keep-alive"]
    if token:
        head.append(f"Authorization: Bearer {token}")
    head += [f"{name}: {value}" for name, value in (headers or {}).items()]
    if body or method in ("POST", "PUT"):
        head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
