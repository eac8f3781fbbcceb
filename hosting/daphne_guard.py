"""daphne with the bounds uvicorn's guarded protocol holds (hosting.http_protocol), in its Twisted HTTP channel.

daphne (Twisted) hands a request to the application only once its whole body is in, so no
ASGI front door can refuse a body before it is read: a 60 MB body was read whole before the
413. Its header limits answer a 400 or nothing (a 70 KB header closed the connection without
an answer; 1,000 headers were a 400) and it has no header or body deadline (a header sent a
byte at a time held a connection open). Run `python -m hosting.daphne_guard` with daphne's
own arguments (`serve --server daphne` and the tests do) for:

- HOSTING_MAX_HEADER_BYTES: a request line and headers over it (however many headers) are
  answered 431 and the connection closed, counted as the lines arrive;
- a body over its path's limit (api.server.before_body.body_limit) plus DRAIN_BYTES, declared or as it
  arrives chunked: 413 at once and the connection closed (up to that much, the front door
  reads and drops it before its own 413, as under uvicorn);
- HOSTING_HEADER_TIMEOUT_S from a request's first byte to its headers' end, and the body
  deadline of hosting.http_protocol.body_deadline_s until its body is in;
- HOSTING_MAX_CONNECTIONS open connections per process.

Not held here: HOSTING_WRITE_TIMEOUT_S (daphne buffers what the application sends without
back-pressure, so a client that does not read is not seen; use uvicorn, the default).
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from daphne import server as daphne_server
from daphne.http_protocol import HTTPFactory
from twisted.internet import reactor
from twisted.web import http

logger = logging.getLogger("daphne.server")


def _answer(status: bytes, message: str, error_type: str) -> bytes:
    body = json.dumps({"error": message, "error_type": error_type}, separators=(",", ":")).encode()
    return (b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\ncontent-length: "
            + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)


class GuardedHTTPChannel(http.HTTPChannel):
    """Twisted's HTTP channel with header bytes (431), body caps (413), deadlines and a connection cap."""

    open_connections = 0
    maxHeaders = 1_000_000  # the bytes bound the headers, as under uvicorn (not their count)

    def __init__(self) -> None:
        super().__init__()
        from hosting.http_protocol import GuardedHttpToolsProtocol

        header_s, self._body_s, self._max_connections, limit, _ = GuardedHttpToolsProtocol.limits()
        self._header_s = header_s
        self.totalHeadersSize = self.MAX_LENGTH = limit
        self._deadline: Any = None
        self._reading_headers = True
        self._body_bytes = 0
        self._body_cap = 0
        self._refused = False
        self._counted = False

    def connectionMade(self) -> None:
        super().connectionMade()
        GuardedHTTPChannel.open_connections += 1
        self._counted = True
        if GuardedHTTPChannel.open_connections > self._max_connections:
            logger.warning("closed a connection: %d open, the limit is %d", self.open_connections,
                           self._max_connections)
            self.transport.abortConnection()

    def connectionLost(self, reason: Any) -> None:
        if self._counted:
            GuardedHTTPChannel.open_connections -= 1
            self._counted = False
        self._disarm()
        super().connectionLost(reason)

    def dataReceived(self, data: bytes) -> None:
        if self._refused:
            return  # answered and closing: nothing more is parsed (or buffered)
        if self._reading_headers and self._deadline is None:
            self._arm(self._header_s, "headers")
        super().dataReceived(data)

    def lineLengthExceeded(self, line: bytes) -> None:
        """A request line or header longer than the whole limit: a 431 rather than a silent close."""
        self._refuse_headers()

    def _respondToBadRequestAndDisconnect(self) -> None:
        """Twisted's 400; a 431 where the cause is the headers' size."""
        if self._reading_headers and self._receivedHeaderSize > self.totalHeadersSize:
            self._refuse_headers()
        else:
            super()._respondToBadRequestAndDisconnect()

    def allHeadersReceived(self) -> None:
        """Headers in time: a body declared over its cap is refused now; else it gets its deadline."""
        from hosting.http_protocol import body_deadline_s
        from models_registry.api.server.before_body import DRAIN_BYTES, body_limit

        super().allHeadersReceived()
        self._reading_headers = False
        path = self._path.split(b"?", 1)[0].decode("latin-1")
        limit = body_limit(path)
        self._body_cap, self._body_bytes = limit + DRAIN_BYTES, 0
        declared = self.length if self.length is not None else 0
        if declared > self._body_cap:
            self._refuse_body(f"request body is {declared} bytes; the limit is {limit}")
            return
        self._arm(body_deadline_s(self._body_s, str(declared).encode(), path), "body")

    def rawDataReceived(self, data: bytes) -> None:
        if not self._handlingRequest and not self._reading_headers:
            self._body_bytes += len(data)
            if self._body_bytes > self._body_cap:  # chunked, or more than declared
                self._refuse_body(f"request body is over the limit of {self._body_cap} bytes")
                return
        super().rawDataReceived(data)

    def allContentReceived(self) -> None:
        """The whole request came: no deadline while the application answers; the next request's headers next."""
        self._disarm()
        self._reading_headers = True
        super().allContentReceived()

    def _refuse_headers(self) -> None:
        limit = self.totalHeadersSize
        logger.info("answered 431 to request headers over %d bytes", limit)
        self._close_with(_answer(
            b"431 Request Header Fields Too Large", f"request headers are over this server's limit of {limit} bytes: "
            "send fewer or shorter headers (cookies, tokens)", "too_large"))

    def _refuse_body(self, message: str) -> None:
        self._close_with(_answer(b"413 Payload Too Large", message, "too_large"))

    def _close_with(self, answer: bytes) -> None:
        self._refused = True
        self._disarm()
        self.transport.write(answer)
        self.transport.loseConnection()

    def _arm(self, seconds: float, what: str) -> None:
        self._disarm()
        self._deadline = reactor.callLater(seconds, self._expired, what, seconds)

    def _disarm(self) -> None:
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None

    def _expired(self, what: str, seconds: float) -> None:
        self._deadline = None
        logger.info("closed a connection whose %s took over %.0f s", what, seconds)
        self._refused = True
        self.transport.abortConnection()


class GuardedHTTPFactory(HTTPFactory):
    """daphne's factory, building guarded channels (its own request class still serves them)."""

    protocol = GuardedHTTPChannel


def main(argv: list[str] | None = None) -> None:
    """daphne's command line, with the guarded factory in place of its own."""
    daphne_server.HTTPFactory = GuardedHTTPFactory  # type: ignore[misc]
    from daphne.cli import CommandLineInterface

    CommandLineInterface().run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
