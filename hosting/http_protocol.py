"""uvicorn's httptools protocol with deadlines for a request's headers and body, and a connection cap.

uvicorn times out idle keep-alive connections only: a client that sends its headers or
body a byte at a time holds a connection (and its memory) for as long as it likes, and
600 such clients stayed connected for minutes. Run uvicorn with
`--http hosting.http_protocol:GuardedHttpToolsProtocol` (`make run`, the container and
the tests do) to close them instead:

- HOSTING_HEADER_TIMEOUT_S: from a connection's first byte (or a kept-alive connection's
  next request) until its headers are complete;
- HOSTING_BODY_TIMEOUT_S, plus one second per MiB the request declares: until its body
  is complete (uploads of large batch files stay possible);
- HOSTING_MAX_CONNECTIONS: connections beyond it are closed as soon as they open.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

logger = logging.getLogger("uvicorn.error")
BYTES_PER_EXTRA_SECOND = 1024 * 1024


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol that closes connections whose headers or body come too slowly."""

    _limits: tuple[float, float, int] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None

    @classmethod
    def limits(cls) -> tuple[float, float, int]:
        """(header timeout, body timeout, max connections), read once the app has set Django up."""
        if cls._limits is None:
            from django.conf import settings

            cls._limits = (settings.HOSTING_HEADER_TIMEOUT_S, settings.HOSTING_BODY_TIMEOUT_S,
                           settings.HOSTING_MAX_CONNECTIONS)
        return cls._limits

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Refuse a connection over the cap; give the first request's headers their deadline."""
        super().connection_made(transport)
        header_s, _, max_connections = self.limits()
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
        """Headers in time: now the body has its own deadline."""
        super().on_headers_complete()
        declared = next((v for n, v in self.headers if n == b"content-length"), b"0")
        try:
            extra = int(declared) / BYTES_PER_EXTRA_SECOND
        except ValueError:
            extra = 0.0
        self._arm(self.limits()[1] + extra, "body")

    def on_message_complete(self) -> None:
        """The whole request came: no deadline while the app answers or the connection idles."""
        super().on_message_complete()
        self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        """Nothing left to time out."""
        self._disarm()
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
