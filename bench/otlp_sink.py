"""`python -m bench.otlp_sink PORT`: an OTLP/HTTP receiver that answers every export 200 and keeps nothing.

bench.tiny --otel points the traced product at it: what the export costs the product is measured, not a
collector's work. It prints the exports and bytes it took when it is stopped (SIGTERM).
"""

from __future__ import annotations

import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

EMPTY = b""  # an ExportTraceServiceResponse with no partial_success: zero bytes of protobuf
taken = {"exports": 0, "bytes": 0}


class Sink(BaseHTTPRequestHandler):
    """POST /v1/traces: read the body, answer 200."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        size = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(size)
        taken["exports"] += 1
        taken["bytes"] += size
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def main() -> None:
    """Serve on 127.0.0.1:PORT until SIGTERM, then print what was taken."""
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink)

    def stop(*_: Any) -> None:
        print(f"otlp sink: {taken['exports']} exports, {taken['bytes']} bytes", flush=True)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    server.serve_forever()


if __name__ == "__main__":
    main()
