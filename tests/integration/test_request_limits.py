"""Limits a real server holds before the application reads a request: header size, bodies on every path.

A web server alone (no worker: nothing here reaches a model), on a loopback port, spoken
to over raw sockets so that a test controls exactly what is sent and when.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tests.stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.one_phase]  # no database in what it checks

MIB = 1024 * 1024


HEADER_TIMEOUT_S = 2.0


@pytest.fixture(scope="module", params=["uvicorn", "daphne"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, int]]:
    """(host, port) of the product's web server: uvicorn with its guarded protocol, as `make run` serves, and
    daphne with hosting.daphne_guard, as `serve --server daphne` does: the same suite holds both to one set of bounds."""
    env = {"HOSTING_MAX_HEADER_BYTES": str(64 * 1024), "HOSTING_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S)}
    with Stack.started(extra_env=env) as running:
        running.start_web(server=request.param)
        yield "127.0.0.1", running.web[0][1]


def exchange(address: tuple[str, int], head: bytes, body_bytes: int = 0, timeout_s: float = 20) -> tuple[int, bytes, int]:
    """(status, raw answer, body bytes sent) of one request; the body is sent until the server answers or closes."""
    with socket.create_connection(address, timeout=timeout_s) as conn:
        sent = 0
        conn.sendall(head)
        conn.setblocking(False)
        answer = b""
        chunk = b"x" * (256 * 1024)
        while sent < body_bytes:
            try:
                answer += conn.recv(65536)
                if answer:
                    break
            except BlockingIOError:
                pass
            try:
                sent += conn.send(chunk[: body_bytes - sent])
            except BlockingIOError:
                conn.settimeout(0.05)
                try:
                    answer += conn.recv(65536)
                except (TimeoutError, BlockingIOError):
                    pass
                conn.setblocking(False)
                if answer:
                    break
            except (BrokenPipeError, ConnectionResetError):
                break
        conn.settimeout(timeout_s)
        try:  # the whole answer: its head, then as much body as its Content-Length says (it may come apart)
            while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < _length(answer):
                more = conn.recv(65536)
                if not more:
                    break
                answer += more
        except ConnectionResetError:
            pass
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0
    return status, answer, sent


def _length(answer: bytes) -> int:
    """The Content-Length an answer's head states (0 when its head is not all in, or states none)."""
    head = answer.partition(b"\r\n\r\n")[0].lower()
    for line in head.split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0


def test_headers_over_the_limit_are_answered_431(server: tuple[str, int]) -> None:
    filler = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"a" * 1000) for i in range(200))  # 200 KB of headers
    status, answer, _ = exchange(server, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + filler + b"\r\n")
    assert status == 431, answer[:200]
    assert b"limit of 65536 bytes" in answer


def test_an_endless_header_is_cut_off_at_the_limit(server: tuple[str, int]) -> None:
    # One header that never ends: the server must answer (and stop buffering) long before 50 MB.
    head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Endless: "
    status, answer, sent = exchange(server, head, body_bytes=50 * MIB)
    assert status == 431, answer[:200]
    assert sent < 10 * MIB


def test_headers_under_the_limit_are_served(server: tuple[str, int]) -> None:
    filler = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"a" * 1000) for i in range(40))  # 40 KB
    status, answer, _ = exchange(server, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + filler + b"\r\n")
    assert status == 200, answer[:200]


@pytest.mark.parametrize("path", ["/admin/login/", "/metrics", "/dashboard/"])
def test_a_40_mib_post_outside_the_api_is_refused_unread(server: tuple[str, int], path: str) -> None:
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            f"Content-Length: {40 * MIB}\r\n\r\n").encode()
    status, answer, sent = exchange(server, head, body_bytes=40 * MIB)
    assert status == 413, answer[:300]
    assert b'"error_type":"too_large"' in answer
    assert sent < 40 * MIB  # answered before the body was all sent (the old server read all of it first)


def test_a_chunked_admin_post_is_cut_off(server: tuple[str, int]) -> None:
    head = b"POST /admin/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    size = 256 * 1024
    chunk = f"{size:x}\r\n".encode() + b"x" * size + b"\r\n"
    with socket.create_connection(server, timeout=20) as conn:
        conn.sendall(head)
        conn.settimeout(0.01)
        sent, answer = 0, b""
        while sent < 200 * MIB and not answer:
            try:
                conn.sendall(chunk)
                sent += size
                answer = conn.recv(65536)
            except (TimeoutError, BlockingIOError):
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
        conn.settimeout(20)
        try:
            answer += conn.recv(65536) if not answer else b""
        except (ConnectionResetError, TimeoutError):
            pass
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert sent < 40 * MIB


def test_an_encoded_slash_in_a_model_path_is_404(server: tuple[str, int]) -> None:
    status, answer, _ = exchange(server, b"GET /models/all-minilm-l6-v2%2Ffeature-extraction HTTP/1.1\r\n"
                                         b"Host: 127.0.0.1\r\n\r\n")
    assert status == 404, answer[:300]


def test_a_60_mb_api_body_is_refused_before_8_mb_is_read(server: tuple[str, int]) -> None:
    """Issue 35: daphne read a 60 MB body whole before the 413 (uvicorn cut it at about 2.4 MB)."""
    head = (f"POST /models/any HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {60 * MIB}\r\n\r\n").encode()
    status, answer, sent = exchange(server, head, body_bytes=60 * MIB)
    assert status == 413, answer[:300]
    assert sent < 8 * MIB


def test_many_small_headers_are_counted_by_their_bytes(server: tuple[str, int]) -> None:
    """1,000 headers: served within the byte limit (daphne answered 400), 431 over it, on either server."""
    small = b"".join(b"X-F%d: a\r\n" % i for i in range(1000))  # about 10 KB
    status, answer, _ = exchange(server, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + small + b"\r\n")
    assert status == 200, answer[:200]
    large = b"".join(b"X-F%d: %s\r\n" % (i, b"a" * 90) for i in range(1000))  # about 100 KB
    status, answer, _ = exchange(server, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + large + b"\r\n")
    assert status == 431, answer[:200]


def test_one_70_kb_header_is_a_431(server: tuple[str, int]) -> None:
    """daphne closed the connection without an answer."""
    status, answer, _ = exchange(server, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "
                                 + b"a" * (70 * 1024) + b"\r\n\r\n")
    assert status == 431, answer[:200]


def test_headers_sent_a_byte_at_a_time_are_cut_at_the_deadline(server: tuple[str, int]) -> None:
    """daphne kept such a connection open (25 s and counting); both close it after HOSTING_HEADER_TIMEOUT_S."""
    with socket.create_connection(server, timeout=5) as conn:
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        started = time.monotonic()
        closed = False
        while time.monotonic() - started < HEADER_TIMEOUT_S + 15:  # bounded: a byte every 0.25 s
            try:
                conn.sendall(b"X")
                conn.settimeout(0.25)
                if conn.recv(65536) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
    assert closed
