"""uvicorn's httptools protocol with deadlines for a request's headers, its body and its answer's writes, and a
connection cap.

uvicorn times out idle keep-alive connections only: a client that sends its headers or
body a byte at a time holds a connection (and its memory) for as long as it likes, and
600 such clients stayed connected for minutes. Run uvicorn with
`--http hosting.http_protocol:GuardedHttpToolsProtocol` (`make run`, the container and
the tests do) to close them instead:

- HOSTING_HEADER_TIMEOUT_S: from a connection's first byte (or a kept-alive connection's
  next request) until its headers are complete;
- HOSTING_BODY_TIMEOUT_S, plus one second per MiB the request declares up to its path's
  body limit (api.server.before_body.body_limit): until its body is complete (uploads of large batch
  files stay possible; a declared 1 GiB on a 1 MiB path gets no more than 1 MiB's time);
- HOSTING_MAX_CONNECTIONS: connections beyond it are closed as soon as they open;
- HOSTING_MAX_HEADER_BYTES: a request line and headers over it are answered 431 and the
  connection closed (httptools itself has no limit: 200 MB of headers were buffered whole).
  Counted as the bytes arrive, so an endless header is cut off at the limit plus one read.
- HOSTING_WRITE_TIMEOUT_S: a response (a stream above all) whose client takes nothing of
  what is written for this long, from when the socket's buffers are full (the transport
  pauses writing), is cut: the connection is aborted (what is buffered dropped), the app
  hears http.disconnect and its work is cancelled (front_door). A stream whose client never
  read stayed open with megabytes stuck in the socket, holding a connection slot.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

logger = logging.getLogger("uvicorn.error")
BYTES_PER_EXTRA_SECOND = 1024 * 1024


def body_deadline_s(base_s: float, declared: bytes, path: str) -> float:
    """Seconds a body may take: base_s, plus 1 s per MiB declared, up to what path's limit lets through.

    A declared length over the limit is refused after at most DRAIN_BYTES more are read, so
    a huge declared length buys no more time than the limit and that drain.
    """
    from models_registry.api.server.before_body import DRAIN_BYTES, body_limit

    try:
        length = max(int(declared), 0)
    except ValueError:
        return base_s
    return base_s + min(length, body_limit(path) + DRAIN_BYTES) / BYTES_PER_EXTRA_SECOND


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol that closes connections whose headers or body come too slowly."""

    _limits: tuple[float, float, int, int, float] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._reading_headers = True  # between a request's first byte and its headers' end
        self._header_bytes = 0  # bytes received while reading this request's headers
        self._headers_refused = False
        self._write_deadline: asyncio.TimerHandle | None = None

    @classmethod
    def limits(cls) -> tuple[float, float, int, int, float]:
        """(header timeout, body timeout, max connections, max header bytes, write timeout), read once Django is set up."""
        if cls._limits is None:
            from django.conf import settings

            cls._limits = (settings.HOSTING_HEADER_TIMEOUT_S, settings.HOSTING_BODY_TIMEOUT_S,
                           settings.HOSTING_MAX_CONNECTIONS, settings.HOSTING_MAX_HEADER_BYTES,
                           settings.HOSTING_WRITE_TIMEOUT_S)
        return cls._limits

    def pause_writing(self) -> None:
        """The client stopped taking what is written: it has HOSTING_WRITE_TIMEOUT_S to take some again."""
        super().pause_writing()
        seconds = self.limits()[4]
        if self._write_deadline is None and seconds > 0:
            self._write_deadline = self.loop.call_later(seconds, self._write_expired, seconds)

    def resume_writing(self) -> None:
        """The client took what was buffered: no write deadline until the buffers fill again."""
        super().resume_writing()
        self._disarm_write()

    def _disarm_write(self) -> None:
        if self._write_deadline is not None:
            self._write_deadline.cancel()
            self._write_deadline = None

    def _write_expired(self, seconds: float) -> None:
        self._write_deadline = None
        if not self.transport.is_closing():
            logger.info("aborted a connection whose client took nothing written for %.0f s", seconds)
            self.transport.abort()  # close() would wait for the buffer to flush: the client is not reading

    def data_received(self, data: bytes) -> None:
        """Feed the parser; a request whose headers are still coming past the limit is answered 431."""
        if self._headers_refused or self.transport.is_closing():
            return  # answered and closing: nothing more is parsed (or buffered)
        if self._reading_headers:
            self._header_bytes += len(data)
        super().data_received(data)
        # Still reading headers after this read: everything counted was header bytes.
        if self._reading_headers and self._header_bytes > self.limits()[3] and not self.transport.is_closing():
            self._refuse_headers()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a parser error; a 431 where the error is ours (headers over the limit)."""
        if self._headers_refused:
            self._send_431()
        else:
            super().send_400_response(msg)

    def _refuse_headers(self) -> None:
        self._headers_refused = True
        self._send_431()

    def _send_431(self) -> None:
        limit = self.limits()[3]
        logger.info("answered 431 to request headers over %d bytes", limit)
        body = json.dumps({"error": f"request headers are over this server's limit of {limit} bytes: "
                                    "send fewer or shorter headers (cookies, tokens)"}).encode()
        self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                             b"content-type: application/json\r\ncontent-length: " + str(len(body)).encode()
                             + b"\r\nconnection: close\r\n\r\n" + body)
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Refuse a connection over the cap; give the first request's headers their deadline."""
        super().connection_made(transport)
        header_s, _, max_connections, _, _ = self.limits()
        if len(self.connections) > max_connections:
            logger.warning("closed a connection: %d open, the limit is %d", len(self.connections), max_connections)
            transport.close()
            return
        self._arm(header_s, "headers")

    def on_message_begin(self) -> None:
        """A kept-alive connection's next request: its headers get the header deadline."""
        super().on_message_begin()
        if self._deadline is None:
            self._arm(self.limits()[0], "headers")

    def on_headers_complete(self) -> None:
        """Headers in time and within the limit: now the body has its own deadline."""
        limit = self.limits()[3]
        # Summed only when it could be over: a header line on the wire is its name and value plus ": " and
        # CRLF (one byte less without the space), and every byte of it was counted in _header_bytes.
        if self._header_bytes + len(self.headers) > limit and (
                len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers) > limit):
            self._headers_refused = True
            # Raised inside the parser's callback: uvicorn answers the parser error (our 431) and closes.
            raise ValueError("request headers over the limit")
        self._reading_headers = False
        super().on_headers_complete()
        declared = next((v for n, v in self.headers if n == b"content-length"), b"0")
        self._arm(body_deadline_s(self.limits()[1], declared, self.scope.get("path", "/")), "body")

    def on_message_complete(self) -> None:
        """The whole request came: no deadline while the app answers or the connection idles."""
        super().on_message_complete()
        self._disarm()
        self._reading_headers, self._header_bytes = True, 0  # a kept-alive connection's next request

    def connection_lost(self, exc: Exception | None) -> None:
        """Nothing left to time out."""
        self._disarm()
        self._disarm_write()
        super().connection_lost(exc)

    def _arm(self, seconds: float, what: str) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired, what, seconds)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self, what: str, seconds: float) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            logger.info("closed a connection whose %s took over %.0f s", what, seconds)
            self.transport.close()
