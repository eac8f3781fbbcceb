"""Queue limits, live settings, failures: overload answers at once, nothing hangs or is lost."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from models_registry.core.sources import LOAD_FAILED
from tests import model_factory
from tests.integration.admin_session import AdminSession
from tests.integration.common import MiniLMReference, post_many, sentences, wrong_answers
from tests.stack import Stack, http_json, wait_until

pytestmark = pytest.mark.integration

EMB = "emb"
BROKEN = "broken"
ADMIN_PASSWORD = "admin-password-for-tests"


@pytest.fixture(scope="module")
def reference() -> MiniLMReference:
    """In-process reference vectors."""
    return MiniLMReference()


@pytest.fixture(scope="module")
def limited() -> Iterator[Stack]:
    """One worker; a small queue on the embedding model; a model whose source cannot load."""
    with Stack.started() as stack:
        stack.manage("register_model", EMB, "--source", str(model_factory.minilm_path()), "--task",
                     "feature-extraction", "--pooling", "mean", "--normalize", "--max-batch-size", "8",
                     "--max-queue-size", "16", "--timeout", "30")
        stack.manage("register_model", BROKEN, "--source", "hosting-tests/no-such-model", "--task", "fill-mask")
        stack.manage("createsuperuser", "--noinput", "--username", "ops", "--email", "ops@example.com",
                     env={"DJANGO_SUPERUSER_PASSWORD": ADMIN_PASSWORD})
        stack.create_token("all")
        stack.start_worker()
        stack.start_web()
        stack.wait_ready([EMB])
        yield stack


def _model(stack: Stack, name: str) -> dict:
    status, _, body = http_json("GET", f"{stack.url}/models/{name}", token=stack.tokens["all"])
    assert status == 200, body
    return body


def test_burst_over_the_queue_limit_gets_fast_503s_and_admitted_requests_succeed(
        limited: Stack, reference: MiniLMReference) -> None:
    # Long inputs: admitted requests wait for real compute, refusals must not.
    texts = [f"{i} " + " ".join(["overload"] * 150) for i in range(300)]
    log = limited.workdir / "web-0.log"
    log_start = log.stat().st_size
    answers = asyncio.run(post_many(f"{limited.url}/models/{EMB}", limited.tokens["all"], texts, concurrency=150))
    by_status: dict[int, list] = {}
    for answer in answers:
        by_status.setdefault(answer.status, []).append(answer)
    assert set(by_status) <= {200, 503}, {s: a[0].body for s, a in by_status.items()}
    overloaded = by_status.get(503, [])
    assert overloaded, "a burst of 150 concurrent requests never met a queue of 16"
    assert all(a.body["error_type"] == "overloaded" for a in overloaded)
    assert all(int(a.headers["retry-after"]) >= 1 for a in overloaded)
    # Refusals never wait for capacity: the server answers them far sooner than admitted
    # requests (its own per-request log lines; the client's clock includes its own queueing).
    with log.open() as handle:
        handle.seek(log_start)
        lines = handle.read().splitlines()
    # (a refusal from the fast path's mark says known_full=1 after its total_ms)
    server_ms = {status: [float(line.rsplit("total_ms=", 1)[1].split()[0]) for line in lines
                          if f"status={status}" in line and "total_ms=" in line] for status in (200, 503)}
    assert len(server_ms[503]) == len(overloaded)
    median_503, median_200 = statistics.median(server_ms[503]), statistics.median(server_ms[200])
    assert median_503 < median_200 / 2, (median_503, median_200)
    assert len(by_status.get(200, [])) >= 16
    assert wrong_answers(by_status[200], texts, reference) == []


def test_a_limit_changed_in_the_admin_reaches_the_running_worker_within_2s(limited: Stack) -> None:
    admin = AdminSession(limited.url, "ops", ADMIN_PASSWORD)
    page = f"/admin/models_registry/registeredmodel/{_model_id(admin, EMB)}/change/"
    fields = admin.form(page)
    fields["tasks-0-max_batch_size"] = "2"
    fields["tasks-0-max_queue_size"] = "64"
    fields["_save"] = "Save"
    status, body = admin.post(page, fields)
    assert status == 200 and "errornote" not in body, body[:2000]
    changed_at = time.monotonic()
    # Every request sent 2 s after the save must meet the new cap on the running worker.
    time.sleep(max(0.0, changed_at + 2.0 - time.monotonic()))
    answers = asyncio.run(post_many(f"{limited.url}/models/{EMB}", limited.tokens["all"],
                                    sentences(24, seed=5), concurrency=24))
    assert all(a.status == 200 for a in answers)
    assert max(int(a.headers["x-batch-size"]) for a in answers) <= 2
    assert _model(limited, EMB)["tasks"][0]["max_batch_size"] == 2
    fields["tasks-0-max_batch_size"] = "8"
    fields["tasks-0-max_queue_size"] = "16"
    assert admin.post(page, fields)[0] == 200


def _model_id(admin: AdminSession, name: str) -> str:
    html = admin.get(f"/admin/models_registry/registeredmodel/?q={name}")
    marker = "/admin/models_registry/registeredmodel/"
    for chunk in html.split(marker)[1:]:
        candidate = chunk.split("/")[0]
        if candidate.isdigit():
            return candidate
    raise AssertionError(f"model {name} not in the admin change list")


def test_a_broken_model_reports_its_error_while_others_keep_serving(limited: Stack) -> None:
    wait_until(lambda: _model(limited, BROKEN)["state"] == "error", 30, "the broken model to fail loading")
    broken = _model(limited, BROKEN)
    # The API says that it failed, not why: the raw load error (a path, a hub id) is for the admin.
    assert broken["error"] == LOAD_FAILED and "no-such-model" not in broken["error"]
    status, _, body = http_json("POST", f"{limited.url}/models/{BROKEN}", {"inputs": "a [MASK]."},
                                token=limited.tokens["all"])
    assert status == 503 and body["error_type"] == "unavailable" and "error" in body["error"]
    status, _, body = http_json("POST", f"{limited.url}/models/{EMB}", {"inputs": "still fine"},
                                token=limited.tokens["all"])
    assert status == 200 and len(body) == 384


def test_ready_waits_for_a_model_that_failed_to_load_and_names_it(limited: Stack) -> None:
    # Every enabled model the worker is meant to serve must be servable: the broken one keeps /ready at 503.
    wait_until(lambda: _model(limited, BROKEN)["state"] == "error", 30, "the broken model to fail loading")
    status, _, body = http_json("GET", f"{limited.url}/ready", token=limited.tokens["all"])
    assert status == 503 and body["checks"]["models_not_ready"] == [BROKEN], body
    assert EMB in body["checks"]["models_ready"] and body["checks"]["workers_alive"] == 1


def test_disabling_a_model_unloads_it_and_enabling_loads_it_again(limited: Stack) -> None:
    source = str(model_factory.minilm_path())
    limited.manage("register_model", EMB, "--source", source, "--task", "feature-extraction", "--disabled")
    try:
        def refused() -> bool:
            status, _, body = http_json("POST", f"{limited.url}/models/{EMB}", {"inputs": "x"},
                                        token=limited.tokens["all"])
            return status == 503 and body["error_type"] == "unavailable"

        wait_until(refused, 5, "the disabled model to be refused")
        assert _model(limited, EMB)["state"] == "disabled"
    finally:
        limited.manage("register_model", EMB, "--source", source, "--task", "feature-extraction", "--enabled")
    limited.wait_ready([EMB], timeout_s=60)

    # "ready" can come from a heartbeat sent before the worker saw the disable; the reload
    # that follows answers 503 while it loads (README), so wait for the first 200.
    def served() -> bool:
        status, _, _ = http_json("POST", f"{limited.url}/models/{EMB}", {"inputs": "back"},
                                 token=limited.tokens["all"])
        return status == 200

    assert wait_until(served, 60, "the re-enabled model to answer")


def test_a_timed_out_request_answers_504_and_is_not_computed(limited: Stack) -> None:
    source = str(model_factory.minilm_path())
    limited.manage("register_model", EMB, "--source", source, "--task", "feature-extraction",
                   "--task-name", "hurry", "--timeout", "0.1", "--max-batch-delay-ms", "0",
                   "--max-request-tokens", "0")  # no budget: the test is about the deadline, not a 413
    wait_until(lambda: any(t["name"] == "hurry" for t in _model(limited, EMB)["tasks"]), 5, "the new task")

    def worker_knows_it() -> bool:  # the worker reads the registry every second; until then: 503 (not served)
        status = http_json("POST", f"{limited.url}/models/{EMB}/hurry", {"inputs": "x"},
                           token=limited.tokens["all"], timeout=10)[0]
        return status in (200, 504)

    wait_until(worker_knows_it, 10, "the worker to read the new task", interval_s=0.2)
    log = limited.workdir / "worker-0.log"
    dropped_before = log.read_text().count("dropped")  # a probe above may have been dropped too
    long_inputs = [" ".join(["word"] * 200)] * 200  # far more than 0.1 s of compute on this machine
    status, _, body = http_json("POST", f"{limited.url}/models/{EMB}/hurry", {"inputs": long_inputs},
                                token=limited.tokens["all"], timeout=10)
    assert status == 504 and body["error_type"] == "timeout", body
    # The worker drops what nobody waits for any more instead of computing all of it: the expired items
    # before compute, or the rest of a batch that ran past its deadline (whichever the timing gives).
    wait_until(lambda: log.read_text().count("dropped") > dropped_before, 10, "the worker to drop items")
    status, _, body = http_json("POST", f"{limited.url}/models/{EMB}", {"inputs": "after"},
                                token=limited.tokens["all"])
    assert status == 200


@pytest.fixture(scope="module")
def killable() -> Iterator[Stack]:
    """One model on a stack of its own: the tests kill its workers (two_workers replaces them)."""
    with Stack.started() as stack:
        stack.manage("register_model", EMB, "--source", str(model_factory.minilm_path()), "--task",
                     "feature-extraction", "--pooling", "mean", "--normalize", "--max-batch-size", "16",
                     "--max-queue-size", "4096", "--timeout", "60")
        stack.create_token("all")
        stack.start_web()
        yield stack


@pytest.fixture()
def two_workers(killable: Stack) -> Stack:
    """Two live workers serving one model, and no other: the ones an earlier test stopped are replaced."""
    stack = killable
    stack.workers = [process for process in stack.workers if process.poll() is None]
    while len(stack.workers) < 2:
        stack.start_worker()

    def both_ready() -> bool:
        status, _, body = http_json("GET", f"{stack.url}/models/{EMB}", token=stack.tokens["all"])
        ready = [w for w in body["workers"] if w["state"] == "ready"] if status == 200 else []
        # a killed worker's heartbeat counts until it expires: wait for exactly the two live ones
        return len(ready) == 2 and http_json("GET", f"{stack.url}/ready")[2]["checks"].get("workers_alive") == 2

    wait_until(both_ready, 90, f"two live workers ready (logs in {stack.workdir})", interval_s=0.25)
    return stack


def _log_of(process: subprocess.Popen) -> Path:
    """The log file a worker writes (its stdout)."""
    return Path(os.readlink(f"/proc/{process.pid}/fd/1"))


def _run_while(stack: Stack, texts: list[str], after_answers: int, action) -> list:
    """Send texts at concurrency 64; call action() once after_answers answers came back."""
    fired = threading.Event()
    count = [0]

    def on_answer(_answer) -> None:
        count[0] += 1
        if count[0] == after_answers and not fired.is_set():
            fired.set()
            threading.Thread(target=action, daemon=True).start()

    return asyncio.run(post_many(f"{stack.url}/models/{EMB}", stack.tokens["all"], texts, concurrency=64,
                                 on_answer=on_answer))


@pytest.mark.slow
@pytest.mark.one_phase
def test_sigkill_of_one_worker_under_load_loses_nothing(two_workers: Stack, reference: MiniLMReference) -> None:
    texts = sentences(2000, seed=21)
    victim = two_workers.workers[0]
    answers = _run_while(two_workers, texts, 400, lambda: victim.send_signal(signal.SIGKILL))
    assert victim.wait(10) == -signal.SIGKILL
    statuses = [a.status for a in answers]
    assert len(answers) == 2000
    assert statuses.count(200) == 2000, f"not all answered: { {s: statuses.count(s) for s in set(statuses)} }"
    assert wrong_answers(answers, texts, reference) == []


@pytest.mark.slow
@pytest.mark.one_phase
def test_sigterm_drains_a_worker_without_losing_requests(two_workers: Stack, reference: MiniLMReference) -> None:
    texts = sentences(600, seed=22)
    victim = two_workers.workers[0]
    victim_log = _log_of(victim)
    answers = _run_while(two_workers, texts, 150, lambda: victim.send_signal(signal.SIGTERM))
    assert victim.wait(60) == 0, "a drained worker exits cleanly"
    assert [a.status for a in answers].count(200) == 600
    assert wrong_answers(answers, texts, reference) == []
    log = victim_log.read_text()
    assert "draining" in log and "stopped" in log


@pytest.mark.one_phase
def test_requests_get_503_once_no_worker_is_left(two_workers: Stack) -> None:
    for worker in two_workers.workers:
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)

    def refused() -> bool:
        started = time.monotonic()
        status, _, body = http_json("POST", f"{two_workers.url}/models/{EMB}", {"inputs": "x"},
                                    token=two_workers.tokens["all"], timeout=70)
        return status == 503 and body["error_type"] == "unavailable" and time.monotonic() - started < 60

    wait_until(refused, 30, "503 unavailable with no worker left")
    assert http_json("GET", f"{two_workers.url}/ready")[0] == 503
    assert http_json("GET", f"{two_workers.url}/health")[0] == 200


@pytest.mark.one_phase
def test_broker_loss_answers_503_fast_and_service_resumes() -> None:
    stack = Stack.create(own_redis=True)
    try:
        stack.manage("register_model", EMB, "--source", str(model_factory.minilm_path()), "--task",
                     "feature-extraction", "--pooling", "mean", "--normalize")
        stack.create_token("all")
        stack.start_worker()
        stack.start_web()
        stack.wait_ready([EMB])
        assert stack.redis is not None
        stack.redis.stop()
        started = time.monotonic()
        status, _, body = http_json("POST", f"{stack.url}/models/{EMB}", {"inputs": "x"}, token=stack.tokens["all"])
        assert status == 503 and body["error_type"] == "unavailable", body
        assert time.monotonic() - started < 1.5
        assert http_json("GET", f"{stack.url}/health", timeout=2)[0] == 200
        stack.redis.restart()
        back = time.monotonic()

        def serving() -> bool:
            return http_json("POST", f"{stack.url}/models/{EMB}", {"inputs": "y"}, token=stack.tokens["all"],
                             timeout=10)[0] == 200

        wait_until(serving, 30, "service to resume after Redis returned", interval_s=0.2)
        print(f"recovered {time.monotonic() - back:.2f}s after Redis returned")
        assert all(w.poll() is None for w in stack.workers), "the worker must survive the broker's absence"
    finally:
        stack.stop()


def test_load_now_in_the_admin_makes_the_workers_load_again(limited: Stack) -> None:
    log = limited.workdir / "worker-0.log"
    wait_until(lambda: _model(limited, BROKEN)["state"] == "error", 30, "the broken model to fail loading")
    failed_load = re.compile(r"loading model broken(\.v\d+)? from")  # by its version's wire name once versioned
    attempts = len(failed_load.findall(log.read_text()))
    admin = AdminSession(limited.url, "ops", ADMIN_PASSWORD)
    status, body = admin.post("/admin/models_registry/registeredmodel/", {
        "action": "load_now", "_selected_action": _model_id(admin, BROKEN), "index": "0",
    })
    assert status == 200 and "will be reloaded" in body
    wait_until(lambda: len(failed_load.findall(log.read_text())) > attempts, 10, "a new load attempt")
    wait_until(lambda: _model(limited, BROKEN)["state"] == "error", 30, "the error again")


def test_a_client_that_disconnects_cancels_its_queued_work(limited: Stack) -> None:
    import json as _json
    import socket

    log = limited.workdir / "worker-0.log"
    dropped_before = log.read_text().count("client gone before compute")
    # 16 long inputs (the queue limit here): two batches of 8; the client leaves during the first.
    body = _json.dumps({"inputs": [" ".join(["long"] * 400) + f" {i}" for i in range(16)]}).encode()
    port = limited.web[0][1]
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            f"POST /models/{EMB} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {limited.tokens['all']}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
        )
        time.sleep(0.2)  # queued and computing, then the client goes away
    wait_until(lambda: log.read_text().count("client gone before compute") > dropped_before, 30,
               "the worker to drop the rest of the abandoned request")
