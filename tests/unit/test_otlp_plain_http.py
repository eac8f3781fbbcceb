"""observe.otlp_plain_http: the exporter's HTTP/1.1 transport to a plain-http collector, against real loopback
servers (kept-alive, closing, silent, absent, answering with bytes written by hand)."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest
from opentelemetry.exporter.http.transport._base import BaseHTTPResult
from opentelemetry.exporter.otlp.common.http import _extract_retry_after

from models_registry.observe.otlp_plain_http import PlainHTTPTransport, request_head, send_all


def _answer_of(raw: bytes) -> tuple[BaseHTTPResult, bool]:
    """A request's result when the collector answers with raw bytes (then closes after a while), and whether the
    transport kept the connection for the next request."""
    listener = socket.create_server(("127.0.0.1", 0))

    def answer_once() -> None:
        conn, _ = listener.accept()
        with conn:
            got = b""
            while b"\r\n\r\n" not in got or not got.endswith(b"span"):
                got += conn.recv(65536)
            conn.sendall(raw)
            conn.shutdown(socket.SHUT_WR)
            time.sleep(0.2)

    server = threading.Thread(target=answer_once, daemon=True)
    server.start()
    transport = PlainHTTPTransport()
    result = transport.request("POST", f"http://127.0.0.1:{listener.getsockname()[1]}/v1/traces", data=b"span",
                               timeout=5)
    kept = transport._sock is not None
    transport.close()
    server.join(5)
    listener.close()
    return result, kept


def test_the_request_is_one_head_and_its_body() -> None:
    head = request_head("POST", urlsplit("http://collector:4318/v1/traces?x=1"), {
        "Content-Type": "application/x-protobuf", "Host": "spoofed", "Content-Length": "9"}, 120)
    assert head == (b"POST /v1/traces?x=1 HTTP/1.1\r\nHost: collector:4318\r\n"
                    b"Content-Type: application/x-protobuf\r\nContent-Length: 120\r\n\r\n")


@pytest.mark.parametrize("header", [{"X-Key": "a\r\nX-Injected: 1"}, {"X\nKey": "a"}, {"X-Key": "a\0"}])
def test_a_header_with_a_line_break_is_refused(header: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="line break"):
        request_head("POST", urlsplit("http://c/v1/traces"), header, 0)


def test_parts_sent_through_a_small_buffer_arrive_whole_and_in_order() -> None:
    """send_all keeps sending what a partial sendmsg left, from the middle of a part on."""
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    parts = (b"head\r\n\r\n", b"", bytes(range(256)) * 2000, b"tail")
    received = bytearray()

    def read() -> None:
        while chunk := theirs.recv(1000):
            received.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    with ours:
        send_all(ours, parts)
        ours.shutdown(socket.SHUT_WR)
        reader.join(10)
    theirs.close()
    assert bytes(received) == b"".join(parts)


def test_what_a_partial_send_left_is_sent_next_from_where_it_stopped() -> None:
    """A send cut short (a signal, the send timeout) at any point: the rest follows, nothing twice."""

    class Trickle:
        def __init__(self, most: int) -> None:
            self.most, self.got = most, bytearray()

        def sendmsg(self, views: list[memoryview]) -> int:
            room = self.most
            for view in views:
                taken = bytes(view[:room])
                self.got += taken
                room -= len(taken)
                if not room:
                    break
            return self.most - room

    parts = (b"POST / HTTP/1.1\r\n\r\n", b"", bytes(range(256)) * 40, b"end")
    for most in (1, 7, 19, 256, 10_000, 100_000):
        trickle = Trickle(most)
        send_all(trickle, parts)  # type: ignore[arg-type]
        assert bytes(trickle.got) == b"".join(parts), most


def test_an_answer_by_content_length_keeps_the_connection() -> None:
    result, kept = _answer_of(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 3\r\n\r\nabc")
    assert (result.status_code, result.content(), kept) == (200, b"abc", True)
    assert result.headers()["content-type"] == "application/x-protobuf"


def test_a_chunked_answer_with_trailers_is_joined() -> None:
    raw = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"4;ext=1\r\nwiki\r\n5\r\npedia\r\n0\r\nX-Trailer: t\r\n\r\n")
    result, kept = _answer_of(raw)
    assert (result.status_code, result.content(), kept) == (200, b"wikipedia", True)


def test_interim_answers_are_skipped_and_no_body_statuses_read_none() -> None:
    result, kept = _answer_of(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n")
    assert (result.status_code, result.content(), kept) == (204, b"", True)


@pytest.mark.parametrize(("raw", "keep_alive"), [
    (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", False),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", False),
    (b"HTTP/1.1 503 Busy\r\n\r\nuntil the close", False),  # no length: the close delimits it
], ids=["connection close", "http/1.0", "no length"])
def test_an_answer_that_ends_the_connection_says_so(raw: bytes, keep_alive: bool) -> None:
    assert _answer_of(raw)[1] is keep_alive


@pytest.mark.parametrize("raw", [
    b"SSH-2.0-OpenSSH\r\n\r\n", b"HTTP/1.1 2000 OK\r\n\r\n", b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", b"HTTP/1.1 200 OK\r\nContent-Le",
    b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
], ids=["not http", "bad status", "bad header", "cut body", "cut head", "bad length"])
def test_a_malformed_or_cut_answer_is_a_protocol_error(raw: bytes) -> None:
    """Refused, and retried on a new connection as urllib3's ProtocolError is."""
    result, kept = _answer_of(raw)
    assert isinstance(result.error, http.client.HTTPException), result
    assert PlainHTTPTransport().is_connection_error(result.error) and not kept


def test_retry_after_is_read_as_the_sdk_reads_it() -> None:
    result, _ = _answer_of(b"HTTP/1.1 429 Too Many\r\nRetry-After: 7\r\nContent-Length: 0\r\n\r\n")
    assert _extract_retry_after(result) == 7.0
    assert result.headers()["RETRY-AFTER"] == "7" and "Retry-After" in result.headers()


class _Collector:
    """A real HTTP server on a free loopback port: the bodies it got and the client ports they came from."""

    def __init__(self, http_version: str = "HTTP/1.1", status: int = 200) -> None:
        self.bodies: list[bytes] = []
        self.ports: list[int] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = http_version

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                collector.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
                collector.ports.append(self.client_address[1])
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def collector_of() -> Iterator[Callable[..., _Collector]]:
    started: list[_Collector] = []

    def start(**kwargs: object) -> _Collector:
        started.append(_Collector(**kwargs))  # type: ignore[arg-type]
        return started[-1]

    yield start
    for collector in started:
        collector.stop()


def test_exports_share_one_kept_alive_connection(collector_of: Callable[..., _Collector]) -> None:
    collector, transport = collector_of(), PlainHTTPTransport()
    bodies = [bytes([n]) * (300_000 + n) for n in range(3)]  # each more than a default send buffer
    for body in bodies:
        result = transport.request("POST", collector.url, headers={"Content-Type": "application/x-protobuf"},
                                   data=body, timeout=5)
        assert (result.status_code, result.content(), result.error) == (200, b"{}", None)
    assert collector.bodies == bodies
    assert len(set(collector.ports)) == 1
    transport.close()


def test_a_collector_that_closes_each_connection_gets_a_new_one(collector_of: Callable[..., _Collector]) -> None:
    collector, transport = collector_of(http_version="HTTP/1.0"), PlainHTTPTransport()
    for _ in range(3):
        assert transport.request("POST", collector.url, data=b"span", timeout=5).status_code == 200
    assert len(collector.bodies) == 3 and len(set(collector.ports)) == 3


def test_an_error_status_is_the_result_not_an_error(collector_of: Callable[..., _Collector]) -> None:
    result = PlainHTTPTransport().request("POST", collector_of(status=503).url, data=b"x", timeout=5)
    assert (result.status_code, result.error) == (503, None)


def test_a_stale_kept_alive_connection_is_a_connection_error_retried_on_a_new_one() -> None:
    """A collector that closed the idle connection: the request on it fails as one the SDK retries at once."""
    listener = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1/traces"

    def serve_once_then_close() -> None:
        for _ in range(2):
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                time.sleep(0.1)  # then closes while the client keeps the connection

    server = threading.Thread(target=serve_once_then_close, daemon=True)
    server.start()
    transport = PlainHTTPTransport()
    assert transport.request("POST", url, data=b"first", timeout=5).status_code == 200
    time.sleep(0.3)
    stale = transport.request("POST", url, data=b"second", timeout=5)
    assert stale.error is not None and transport.is_connection_error(stale.error)
    assert transport.request("POST", url, data=b"second", timeout=5).status_code == 200
    server.join(5)
    listener.close()


def test_a_silent_collector_times_out_and_is_not_retried() -> None:
    listener = socket.create_server(("127.0.0.1", 0))  # accepts (the backlog), never answers
    transport = PlainHTTPTransport()
    started = time.monotonic()
    result = transport.request("POST", f"http://127.0.0.1:{listener.getsockname()[1]}/", data=b"x", timeout=0.3)
    assert 0.25 < time.monotonic() - started < 3
    assert isinstance(result.error, TimeoutError) and not transport.is_connection_error(result.error)
    listener.close()


def test_an_absent_collector_is_a_connection_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    transport = PlainHTTPTransport()
    result = transport.request("POST", f"http://127.0.0.1:{port}/v1/traces", data=b"x", timeout=2)
    assert isinstance(result.error, ConnectionRefusedError) and transport.is_connection_error(result.error)


def test_an_https_url_is_refused_not_sent_in_clear() -> None:
    result = PlainHTTPTransport().request("POST", "https://127.0.0.1:4318/v1/traces", data=b"x", timeout=1)
    assert isinstance(result.error, ValueError)
