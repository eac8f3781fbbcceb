"""HOSTING_WRITE_TIMEOUT_S: an answer whose client reads nothing is cut once its socket's buffers stay full that long.

A web server alone (/tokenize answers from the web process: no worker), a client with a tiny
receive buffer that asks for a ~7 MB answer and never reads it. Before, the connection stayed
open with megabytes stuck in the socket for as long as the client liked.
"""

from __future__ import annotations

import json
import shutil
import socket
import time
from collections.abc import Iterator

import pytest

from tests import model_factory
from tests.stack import Stack, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.one_phase]  # no database in what it checks

WRITE_TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # MiniLM's tokenizer alone: without its sentence_bert_config.json (256 tokens) it reads 512, twice the answer
    tokenizer = tmp_path_factory.mktemp("tokenizer")
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        shutil.copy(model_factory.minilm_path() / name, tokenizer / name)
    with Stack.started(extra_env={"HOSTING_WRITE_TIMEOUT_S": str(WRITE_TIMEOUT_S)}) as running:
        running.manage("register_model", "minilm", "--source", str(tokenizer), "--task", "feature-extraction")
        running.create_token("all")
        running.start_web()
        yield running


def _request(stack: Stack) -> bytes:
    body = json.dumps({"model": "minilm", "inputs": ["word " * 600] * 256}).encode()  # 256 x 512 tokens back
    return (f"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {stack.tokens['all']}\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


def _read_all(conn: socket.socket) -> tuple[int, bool]:
    """(bytes read until the server closed, whether it closed) within 30 s."""
    conn.settimeout(30)
    got = 0
    try:
        while chunk := conn.recv(1 << 20):
            got += len(chunk)
    except ConnectionResetError:
        return got, True
    except TimeoutError:
        return got, False
    return got, True


def test_a_client_that_reads_nothing_is_cut_and_one_that_reads_gets_everything(stack: Stack) -> None:
    log = stack.workdir / "web-0.log"
    address = ("127.0.0.1", stack.web[0][1])
    with socket.socket() as reader:  # reads at once: the whole answer
        reader.connect(address)
        reader.sendall(_request(stack))
        whole, closed = _read_all_answer(reader)
    assert whole > 5_000_000 and not closed

    with socket.socket() as stalled:
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect(address)
        stalled.sendall(_request(stack))
        wait_until(lambda: "took nothing written" in log.read_text(), WRITE_TIMEOUT_S + 30,
                   "the server to cut the connection whose client reads nothing")
        time.sleep(0.2)
        got, closed = _read_all(stalled)
    assert closed and got < whole  # what was left in the buffers was dropped
    print(f"\nstalled client: cut after {WRITE_TIMEOUT_S:.0f} s with {got} of {whole} bytes delivered")


def _read_all_answer(conn: socket.socket) -> tuple[int, bool]:
    """(bytes of a whole answer, whether the server closed before its Content-Length was read)."""
    conn.settimeout(30)
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    got = len(rest)
    while got < length:
        chunk = conn.recv(1 << 20)
        if not chunk:
            return got, True
        got += len(chunk)
    return got, False
