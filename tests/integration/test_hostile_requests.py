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
import redis

from tests import model_factory
from tests.stack import Stack, http_json, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.one_phase]

QA, NER, EMBED, NLI, MLM, CHAT = "qa512", "ner512", "minilm", "nli", "mlm", "chat1024"
TIMEOUT = ("--timeout", "60")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Two workers serving a QA and a token-classification model of 512 positions, and MiniLM."""
    root = tmp_path_factory.mktemp("hostile-models")
    paths: dict[str, Path] = {
        QA: model_factory.build_question_answering(root / "qa", positions=512),
        NER: model_factory.build_token_classifier(root / "ner", positions=512),
        NLI: model_factory.build_zero_shot_classifier(root / "nli"),
        MLM: model_factory.build_masked_lm(root / "mlm"),
        CHAT: model_factory.build_tiny_gpt2(root / "chat", positions=1024, chat_template=model_factory.CHAT_TEMPLATE),
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
        running.manage("register_model", NLI, "--source", str(paths[NLI]), "--task", "zero-shot-classification",
                       *TIMEOUT)
        running.manage("register_model", MLM, "--source", str(paths[MLM]), "--task", "fill-mask", *TIMEOUT)
        running.manage("register_model", CHAT, "--source", str(paths[CHAT]), "--task", "text-generation", *TIMEOUT)
        running.create_token("all")
        running.start_worker()
        running.start_worker()
        running.start_web()
        running.wait_ready([QA, NER, EMBED, NLI, MLM, CHAT])
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


# --- issue 27: no small request makes the server unavailable ----------------------------------------------
AVAILABLE_S = 1.0  # the bound, beside an attack that is refused before compute (probes took 0.02-0.07 s)
# Beside legal computes a probe can wait in a busy worker's queue: on the shared 2-core box up to 2.2 s behind
# four 512-token embeddings of a second each. The bound is then what tells a live worker from one taken for dead
# (before the fix: 9 s, then 503 for every model).
BESIDE_COMPUTE_S = 5.0
SMALL_QA = {"inputs": {"question": "Who wrote it?", "context": "Ada wrote it."}}


def _log_sizes(stack: Stack) -> dict[Path, int]:
    return {path: path.stat().st_size for path in stack.workdir.glob("worker-*.log")}


def _logged_since(sizes: dict[Path, int], stack: Stack) -> str:
    text = []
    for path in sorted(stack.workdir.glob("worker-*.log")):
        with path.open("rb") as log:
            log.seek(sizes.get(path, 0))
            text.append(log.read().decode(errors="replace"))
    return "\n".join(text)


def assert_available_during(stack: Stack, attack: Any, bound_s: float = AVAILABLE_S) -> Any:
    """Run attack in a thread; meanwhile and right after it, another model answers at once and no worker is lost.

    Returns the attack's result. Fails when a probe is not a 200 within bound_s, when /ready counts fewer
    live workers, or when a worker's log shows a requeue or a quarantine.
    """
    sizes = _log_sizes(stack)
    workers = len([p for p in stack.workers if p.poll() is None])
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(answer=attack()))
    thread.start()
    probes: list[tuple[int, float, int]] = []  # (status, seconds, workers alive)
    after = 0
    while after < 3:  # until three probes after the attack ended
        after += 0 if thread.is_alive() else 1
        status, _, elapsed = post(stack, QA, SMALL_QA)
        _, _, ready = http_json("GET", f"{stack.url}/ready", timeout=10)
        probes.append((status, elapsed, ready["checks"].get("workers_alive", 0)))
    thread.join(60)
    logged = _logged_since(sizes, stack)
    slow = [probe for probe in probes if probe[0] != 200 or probe[1] > bound_s or probe[2] < workers]
    assert not slow, f"{QA} unavailable while the attack ran: {slow} of {len(probes)} probes\n{logged[-3000:]}"
    assert "requeued" not in logged and "quarantined" not in logged, logged[-3000:]
    return result.get("answer")


def test_a_hypothesis_template_that_pads_each_label_makes_no_one_wait(stack: Stack, workers: list[int]) -> None:
    # 150 bytes that padded each hypothesis to 10 million characters: every worker taken for dead for 45-50 s.
    attack = {"inputs": "the cat sat", "parameters": {"candidate_labels": ["a", "b"],
                                                      "hypothesis_template": "{{}}{:>10000000}"}}
    status, answer, _ = assert_available_during(stack, lambda: post(stack, NLI, attack))
    assert status == 400 and "hypothesis_template" in answer["error"], answer
    for template in ("This is {} {}", "{} {x}", "{} {"):  # were a 500 (IndexError, KeyError, ValueError)
        status, answer, _ = post(stack, NLI, {**attack, "parameters": {**attack["parameters"],
                                                                       "hypothesis_template": template}})
        assert status == 400 and answer["error_type"] == "invalid_input", answer
    status, answer, _ = post(stack, NLI, {"inputs": "the cat sat", "parameters": {"candidate_labels": ["a", "b"],
                                                                                  "hypothesis_template": "It is {}."}})
    assert status == 200 and {e["label"] for e in answer} == {"a", "b"}, answer
    assert_no_worker_died(stack, workers)


def test_a_label_whose_hypothesis_the_model_cannot_read_is_a_400(stack: Stack, workers: list[int]) -> None:
    # "x " * 3000 was a tensor size mismatch (500); under the web's 500 characters, over the tiny model's 128 tokens.
    status, answer, _ = post(stack, NLI, {"inputs": "the cat sat", "parameters": {"candidate_labels": ["x " * 240]}})
    assert status == 400 and "send a shorter label" in answer["error"], answer
    assert_no_worker_died(stack, workers)


def test_concurrent_one_megabyte_texts_cost_what_the_model_reads(stack: Stack, workers: list[int]) -> None:
    # Four legal 1 MB texts computed for 7.3 s in one batch: workers taken for dead, a request quarantined.
    text = "word " * 200_000

    def attack() -> list[tuple[int, Any, float]]:
        answers: list[Any] = [None] * 4
        clients = [threading.Thread(target=lambda i=i: answers.__setitem__(i, post(stack, EMBED, {"inputs": text})))
                   for i in range(4)]
        for client in clients:
            client.start()
        for client in clients:
            client.join(60)
        return answers

    answers = assert_available_during(stack, attack, BESIDE_COMPUTE_S)
    assert [status for status, _, _ in answers] == [200] * 4, answers
    status, short, _ = post(stack, EMBED, {"inputs": "word " * 2000})  # the same 256 tokens the model reads
    assert status == 200
    assert max(abs(a - b) for a, b in zip(_flat(short), _flat(answers[0][1]), strict=True)) < 1e-4
    assert_no_worker_died(stack, workers)


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def test_concurrent_one_megabyte_tokenize_texts_are_cut_on_the_web(stack: Stack, workers: list[int]) -> None:
    """Issue 35: a 1 MB /tokenize text took 1.5-2.2 s and ~140 MB of the web process; 16 raised it to 800 MB, kept."""
    text = "word " * 200_000
    web = stack.web[0][0].pid
    status, _, warm = http_json("POST", f"{stack.url}/tokenize", {"model": EMBED, "inputs": "warm up"},
                                token=stack.tokens["all"])
    assert status == 200, warm
    before = _rss_mib(web)
    answers: list[Any] = [None] * 8

    def ask(index: int) -> None:
        started = time.perf_counter()
        status, _, body = http_json("POST", f"{stack.url}/tokenize", {"model": EMBED, "inputs": text},
                                    token=stack.tokens["all"], timeout=60)
        answers[index] = (status, len(body[0]) if status == 200 else body, time.perf_counter() - started)

    for _ in range(2):  # twice: memory a burst keeps shows in the second
        clients = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
        for client in clients:
            client.start()
        for client in clients:
            client.join(60)
        assert [a[:2] for a in answers] == [(200, 256)] * 8, answers  # MiniLM's max_seq_length
    grown = _rss_mib(web) - before  # the time each took is printed, not asserted (a shared machine)
    print(f"\n8 concurrent 1 MB /tokenize, twice: slowest {max(a[2] for a in answers):.3f} s, web RSS +{grown:.0f} MiB")
    assert grown <= 100
    assert_no_worker_died(stack, workers)


def test_one_megabyte_chat_prompts_are_refused_before_any_tokenizer_sees_them(stack: Stack,
                                                                            workers: list[int]) -> None:
    # 16 chats of 1 MB were tokenized whole on the compute thread (a stream's gap 9-14 s, a probe's 13 s); one
    # with n=8 eight times.
    content = "word " * 200_000

    def chat(n: int) -> tuple[int, Any]:
        status, _, answer = http_json("POST", f"{stack.url}/v1/chat/completions", {
            "model": CHAT, "n": n, "max_tokens": 8, "messages": [{"role": "user", "content": content}]},
            token=stack.tokens["all"], timeout=60)
        return status, answer

    def attack() -> list[Any]:
        answers: list[Any] = [None] * 16
        clients = [threading.Thread(target=lambda i=i: answers.__setitem__(i, chat(8 if i == 0 else 1)))
                   for i in range(16)]
        for client in clients:
            client.start()
        for client in clients:
            client.join(60)
        return answers

    answers = assert_available_during(stack, attack)
    assert all(status == 400 and "characters" in answer["error"]["message"] for status, answer in answers), answers
    status, _, answer = http_json("POST", f"{stack.url}/v1/chat/completions", {
        "model": CHAT, "max_tokens": 4, "messages": [{"role": "user", "content": "hello"}]},
        token=stack.tokens["all"], timeout=60)
    assert status == 200 and answer["usage"]["completion_tokens"] >= 1
    assert_no_worker_died(stack, workers)


def _flat(value: Any) -> list[float]:
    return [x for item in value for x in _flat(item)] if isinstance(value, list) else [float(value)]


def test_a_fill_mask_answer_is_bounded_before_compute(stack: Stack, workers: list[int]) -> None:
    # 3.5 KB of "[MASK] " with top_k 100 answered 180 MB after 16.7 s of compute.
    status, answer, elapsed = assert_available_during(
        stack, lambda: post(stack, MLM, {"inputs": "[MASK] " * 500, "parameters": {"top_k": 100}}))
    assert status == 413 and answer["error_type"] == "too_large" and "mask tokens" in answer["error"], answer
    many = {"inputs": ["[MASK] " * 30] * 32, "parameters": {"top_k": 100}}  # 30 masks each: under the mask bound
    status, answer, _ = post(stack, MLM, many)
    assert status == 413 and "HOSTING_MAX_ANSWER_BYTES" in answer["error"], answer
    status, answer, _ = post(stack, MLM, {"inputs": "Paris is the [MASK] of France.", "parameters": {"top_k": 3}})
    assert status == 200 and len(answer) == 3, answer
    assert_no_worker_died(stack, workers)


def _holding(stack: Stack, pids: list[int], timeout_s: float = 30.0) -> int:
    """The pid among pids whose worker holds a leased message (its in-flight set in Redis): the one that pulled it.

    Not the one burning CPU: the other worker burns CPU too at times (still loading its models, a
    collection), and killing it instead killed no worker holding the request.
    """
    client = redis.Redis.from_url(stack.env["REDIS_URL"])
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for pid in pids:
            if next(client.scan_iter(match=f"*:inflight:*-{pid}-*"), None) is not None:
                return pid
        time.sleep(0.05)
    raise AssertionError(f"no worker of {pids} pulled the request")


def _ready_on(stack: Stack, model: str) -> int:
    """How many workers report model ready."""
    status, _, body = http_json("GET", f"{stack.url}/models/{model}", token=stack.tokens["all"])
    return sum(worker["state"] == "ready" for worker in body["workers"]) if status == 200 else 0


def _computing_alone(stack: Stack, pid: int, timeout_s: float = 30.0) -> None:
    """Wait until worker pid names the redelivered message it computes alone (its computing key in Redis).

    Its CPU alone does not say so: a worker also burns CPU reading a request in (tokenizing
    75,000 tokens) before it computes it, and a kill then is no second death while computing.
    """
    client = redis.Redis.from_url(stack.env["REDIS_URL"])
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if next(client.scan_iter(match=f"*worker:computing:*-{pid}-*"), None) is not None:
            return
        time.sleep(0.05)
    raise AssertionError(f"worker {pid} never computed the redelivered request alone")


def test_a_request_that_kills_two_workers_is_quarantined(stack: Stack, workers: list[int]) -> None:
    """Last in the module: it kills both workers (a third, serving another model, answers the poison)."""
    heavy = {"inputs": [f"word{i} " * 100 for i in range(256)]}  # about 75,000 tokens: seconds of compute
    # /ready needs one worker per model: the second may still be loading, and must pull the request after a death.
    wait_until(lambda: _ready_on(stack, EMBED) == len(workers), 180, f"{EMBED} ready on both workers")
    # A third worker that never pulls this model's requests, but recovers dead workers' messages. Up before the
    # deaths: with no live worker at all the web answers 503 (no live worker serves it) before anyone takes poison.
    stack.start_worker(env={"HOSTING_WORKER_MODELS": QA})
    wait_until(lambda: _ready_on(stack, QA) == len(workers) + 1, 180, "the third worker serving")
    answer: dict[str, Any] = {}
    client = threading.Thread(target=lambda: answer.update(zip(("status", "body", "s"), post(stack, f"{EMBED}/heavy",
                                                                                             heavy))))
    client.start()
    first = _holding(stack, workers)
    os.kill(first, signal.SIGKILL)  # death 1: the request is delivered again, marked
    [second] = [pid for pid in workers if pid != first]
    _computing_alone(stack, second)  # it computes the marked request (alone)
    os.kill(second, signal.SIGKILL)  # death 2 while computing it: poison
    client.join(60)
    assert answer["status"] == 500, f"{answer}\n{stack.logs()}"
    assert "two workers stopped" in answer["body"]["error"]
    count = stack.manage("shell", "-c", "from models_registry.models import QuarantinedRequest as Q; "
                                        f"print(Q.objects.filter(model={EMBED!r}, task='heavy').count())")
    assert count.strip().splitlines()[-1] == "1"
    status, _, _ = post(stack, QA, {"inputs": {"question": "Who wrote it?", "context": "Ada wrote it."}})
    assert status == 200
