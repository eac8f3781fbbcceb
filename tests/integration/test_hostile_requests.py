"""Hostile requests against real workers: nothing a request sends ends a worker or computes uncharged.

Grow this module with every finding: one test per attack, on the module's one stack.
Each test ends by checking that no worker died (the same processes, still running).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import model_factory
from tests.stack import Stack, http_json

pytestmark = [pytest.mark.integration, pytest.mark.one_phase]

QA, NER, EMBED = "qa512", "ner512", "minilm"
TIMEOUT = ("--timeout", "60")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Two workers serving a QA and a token-classification model of 512 positions, and MiniLM."""
    root = tmp_path_factory.mktemp("hostile-models")
    paths: dict[str, Path] = {
        QA: model_factory.build_question_answering(root / "qa", positions=512),
        NER: model_factory.build_token_classifier(root / "ner", positions=512),
    }
    with Stack.started() as running:
        running.manage("register_model", QA, "--source", str(paths[QA]), "--task", "question-answering", *TIMEOUT)
        running.manage("register_model", NER, "--source", str(paths[NER]), "--task", "token-classification",
                       *TIMEOUT)
        running.manage("register_model", EMBED, "--source", str(model_factory.minilm_path()),
                       "--task", "feature-extraction", "--pooling", "mean", "--normalize", *TIMEOUT)
        # A task with no token bound: one request that computes for many seconds (the poison test).
        running.manage("register_model", EMBED, "--source", str(model_factory.minilm_path()),
                       "--task", "feature-extraction", "--task-name", "heavy", "--max-request-tokens", "0",
                       "--max-batch-size", "256", *TIMEOUT)
        running.create_token("all")
        running.start_worker()
        running.start_worker()
        running.start_web()
        running.wait_ready([QA, NER, EMBED])
        yield running


@pytest.fixture(scope="module")
def workers(stack: Stack) -> list[int]:
    """The worker PIDs at the start: every test checks they are all still the ones running."""
    return [process.pid for process in stack.workers]


def post(stack: Stack, model: str, body: Any) -> tuple[int, Any, float]:
    started = time.perf_counter()
    status, _, answer = http_json("POST", f"{stack.url}/models/{model}", body, token=stack.tokens["all"], timeout=60)
    return status, answer, time.perf_counter() - started


def assert_no_worker_died(stack: Stack, workers: list[int]) -> None:
    assert [process.pid for process in stack.workers] == workers
    dead = [process.pid for process in stack.workers if process.poll() is not None]
    assert not dead, f"worker(s) {dead} died:\n{stack.logs()}"


def test_tokenizer_panics_end_no_worker(stack: Stack, workers: list[int]) -> None:
    # The two requests: each made the tokenizers library panic (a BaseException) in the worker.
    long_question = {"question": "why " * 300, "context": "word " * 400}
    for _ in range(2):  # twice: a requeued message would have reached the second worker too
        status, answer, _ = post(stack, QA, {"inputs": long_question})
        assert status == 400 and answer["error_type"] == "invalid_input", answer
        assert "doc_stride" in answer["error"]
        status, answer, _ = post(stack, NER, {"inputs": "word " * 600, "parameters": {"stride": 510}})
        assert status == 400 and "stride must be less than 510" in answer["error"], answer
    assert_no_worker_died(stack, workers)
    status, answer, elapsed = post(stack, QA, {"inputs": {"question": "Who wrote it?", "context": "Ada wrote it."}})
    assert status == 200 and "answer" in answer, answer
    assert elapsed < 5.0  # at once: no worker restarting, nothing requeued ahead of it
    status, _, elapsed = post(stack, NER, {"inputs": "Ada lives in Paris", "parameters": {"stride": 100}})
    assert status == 200 and elapsed < 5.0


def test_a_prompt_is_charged_with_every_input(stack: Stack, workers: list[int]) -> None:
    # 256 one-word inputs behind a 600-word prompt: 256 full-length sequences, over max_request_tokens.
    status, answer, elapsed = post(stack, EMBED, {"inputs": ["a"] * 256, "parameters": {"prompt": "word " * 600}})
    assert status == 413 and "max_request_tokens" in answer["error"], answer
    assert elapsed < 5.0  # refused before compute, not a 504 after the timeout
    status, _, _ = post(stack, EMBED, {"inputs": ["a"] * 256})
    assert status == 200
    assert_no_worker_died(stack, workers)


def test_question_answering_windows_are_charged(stack: Stack, workers: list[int]) -> None:
    # One short question over a long context: about 80 windows of 384 tokens each.
    status, answer, elapsed = post(stack, QA, {"inputs": {"question": "who?", "context": "word " * 20_000}})
    assert status == 413 and "max_request_tokens" in answer["error"], answer
    assert elapsed < 5.0
    assert_no_worker_died(stack, workers)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _computing(pids: list[int], timeout_s: float = 30.0) -> int:
    """The pid among pids that is computing (burning CPU) now."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = {pid: _cpu_s(pid) for pid in pids}
        time.sleep(0.4)
        busy = {pid: _cpu_s(pid) - before[pid] for pid in pids}
        pid = max(busy, key=busy.__getitem__)
        if busy[pid] > 0.1:
            return pid
    raise AssertionError("no worker started computing")


def test_a_request_that_kills_two_workers_is_quarantined(stack: Stack, workers: list[int]) -> None:
    """Last in the module: it kills both workers (a third, serving another model, answers the poison)."""
    heavy = {"inputs": [f"word{i} " * 100 for i in range(256)]}  # about 75,000 tokens: seconds of compute
    answer: dict[str, Any] = {}
    client = threading.Thread(target=lambda: answer.update(zip(("status", "body", "s"), post(stack, f"{EMBED}/heavy",
                                                                                             heavy))))
    client.start()
    # A third worker that never pulls this model's requests, but recovers dead workers' messages.
    stack.start_worker(env={"HOSTING_WORKER_MODELS": QA})
    first = _computing(workers)
    os.kill(first, signal.SIGKILL)  # death 1: the request is delivered again, marked
    [second] = [pid for pid in workers if pid != first]
    assert _computing([second]) == second  # it computes the marked request (alone)
    os.kill(second, signal.SIGKILL)  # death 2 while computing it: poison
    client.join(60)
    assert answer["status"] == 500, answer
    assert "two workers stopped" in answer["body"]["error"]
    count = stack.manage("shell", "-c", "from models_registry.models import QuarantinedRequest as Q; "
                                        f"print(Q.objects.filter(model={EMBED!r}, task='heavy').count())")
    assert count.strip().splitlines()[-1] == "1"
    status, _, _ = post(stack, QA, {"inputs": {"question": "Who wrote it?", "context": "Ada wrote it."}})
    assert status == 200
