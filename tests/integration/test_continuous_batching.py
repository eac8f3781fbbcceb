"""Continuous batching on the real stack: a short request joins running long ones, a cancelled one frees its row."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests import model_factory
from tests.stack import Stack, wait_until

pytestmark = pytest.mark.integration

WIDE, NARROW = "cb-wide", "cb-narrow"  # the same tiny GPT-2: 8 rows, 2 rows


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One worker, so that every long request runs in its one decode batch."""
    path = model_factory.build_tiny_gpt2(tmp_path_factory.mktemp("cb") / "gpt2", positions=1024,
                                         chat_template=model_factory.CHAT_TEMPLATE)
    with Stack.started() as running:
        for name, rows in ((WIDE, "8"), (NARROW, "2")):
            running.manage("register_model", name, "--source", str(path), "--task", "text-generation",
                           "--max-batch-size", rows, "--timeout", "120")
        for token in ("all", "greedy", "modest"):
            running.create_token(token)
        running.start_worker()
        running.start_web()
        running.wait_ready([WIDE, NARROW])
        yield running


class Generation(threading.Thread):
    """One streamed completion in a thread: when its first chunk came, when it ended, and what it said."""

    def __init__(self, stack: Stack, model: str, tokens: int, hang_up_after_first: bool = False) -> None:
        super().__init__(daemon=True)
        self.stack, self.model, self.tokens, self.hang_up = stack, model, tokens, hang_up_after_first
        self.first = threading.Event()
        self.ended_at: float | None = None
        self.text = ""
        self.finish_reason: str | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.stream("POST", f"{self.stack.url}/v1/completions", timeout=120,
                              headers={"Authorization": f"Bearer {self.stack.tokens['all']}"},
                              json={"model": self.model, "prompt": "The cat sees", "max_tokens": self.tokens,
                                    "temperature": 0, "stream": True}) as response:
                assert response.status_code == 200, response.read()
                for line in response.iter_lines():
                    if not line.startswith("data: {"):
                        continue
                    choice: dict[str, Any] = json.loads(line[6:])["choices"][0]
                    self.text += choice["text"]
                    self.finish_reason = choice["finish_reason"] or self.finish_reason
                    self.first.set()
                    if self.hang_up:
                        break
        except BaseException as error:  # noqa: BLE001 - the test reads it
            self.error = error
        finally:
            self.ended_at = time.perf_counter()
            self.first.set()


def started(stack: Stack, model: str, tokens: int, count: int) -> list[Generation]:
    """count generations running (each has had its first token)."""
    runs = [Generation(stack, model, tokens) for _ in range(count)]
    for run in runs:
        run.start()
    for run in runs:
        assert run.first.wait(60) and run.error is None, run.error
    return runs


def test_a_short_request_finishes_while_long_ones_run(stack: Stack) -> None:
    long_ones = started(stack, WIDE, 500, 4)
    short = Generation(stack, WIDE, 4)
    short.start()
    short.join(60)
    assert short.error is None and short.finish_reason == "length" and short.ended_at is not None
    for run in long_ones:
        run.join(120)
        assert run.error is None and run.finish_reason == "length", run.error
    # It joined the running batch at the next step instead of waiting for the long ones to end.
    assert all(run.ended_at is not None and short.ended_at < run.ended_at for run in long_ones)


def test_a_cancelled_request_frees_its_row_for_the_next(stack: Stack) -> None:
    witness = started(stack, NARROW, 500, 1)[0]
    leaver = Generation(stack, NARROW, 500, hang_up_after_first=True)
    leaver.start()
    assert leaver.first.wait(60)
    waiter = Generation(stack, NARROW, 4)  # both rows are taken: it waits for one
    waiter.start()
    waiter.join(60)
    assert waiter.error is None and waiter.finish_reason == "length"
    witness.join(120)
    assert witness.error is None and witness.finish_reason == "length"
    # The leaver's row was freed when its client went, not when its 500 tokens would have been done.
    assert waiter.ended_at is not None and witness.ended_at is not None and waiter.ended_at < witness.ended_at
    wait_until(lambda: "client gone" in stack.logs(), 20, "the worker to log the cancelled stream")


class Flood(threading.Thread):
    """One streamed /v1/completions of several prompts and choices: when each choice ended, and its tokens."""

    def __init__(self, stack: Stack, token: str, prompts: list[str], n: int, tokens: int) -> None:
        super().__init__(daemon=True)
        self.stack, self.token, self.prompts, self.n, self.tokens = stack, token, prompts, n, tokens
        self.status = 0
        self.texts: dict[int, str] = {}
        self.ended: dict[int, float] = {}
        self.usage: dict[str, Any] = {}
        self.started_streaming = threading.Event()

    def run(self) -> None:
        body = {"model": WIDE, "prompt": self.prompts, "n": self.n, "max_tokens": self.tokens, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True}}
        with httpx.stream("POST", f"{self.stack.url}/v1/completions", json=body, timeout=120,
                          headers={"Authorization": f"Bearer {self.stack.tokens[self.token]}"}) as response:
            self.status = response.status_code
            for line in response.iter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                self.usage = chunk.get("usage") or self.usage
                for choice in chunk.get("choices") or []:
                    self.started_streaming.set()
                    self.texts[choice["index"]] = self.texts.get(choice["index"], "") + choice["text"]
                    if choice["finish_reason"]:
                        self.ended[choice["index"]] = time.perf_counter()
        self.started_streaming.set()


def test_a_client_holding_every_row_yields_to_another_and_no_answer_is_lost(stack: Stack) -> None:
    # The greedy client asks for 16 long sequences in two requests: twice the 8 rows there are. The first
    # streams once its 8 sequences run (a request answers once each of its choices has started); the
    # second's wait for rows.
    floods = [Flood(stack, "greedy", ["hello", "hello there"], n=4, tokens=300) for _ in range(2)]
    floods[0].start()
    assert floods[0].started_streaming.wait(60)
    floods[1].start()
    time.sleep(0.2)
    sent = time.perf_counter()
    modest = httpx.post(f"{stack.url}/v1/chat/completions", timeout=60,
                        headers={"Authorization": f"Bearer {stack.tokens['modest']}"},
                        json={"model": WIDE, "max_tokens": 8, "temperature": 0,
                              "messages": [{"role": "user", "content": "The cat sees"}]})
    answered = time.perf_counter()
    assert modest.status_code == 200, modest.text
    assert modest.json()["usage"]["completion_tokens"] >= 1
    for flood in floods:
        flood.join(120)
        assert not flood.is_alive() and flood.status == 200
        assert sorted(flood.ended) == list(range(8)), flood.ended  # every choice ended
        # Greedy: the four choices of a prompt say the same, whether or not they yielded their rows on the way.
        for first in (0, 4):
            assert flood.texts[first] and len({flood.texts[first + k] for k in range(4)}) == 1, flood.texts
        assert flood.usage["completion_tokens"] > 0
    # The modest client's row was taken from the greedy one at the next step: its answer came before
    # any of the greedy sequences had finished, not after their first rows were done.
    assert answered < min(min(f.ended.values()) for f in floods), (answered - sent)
    assert "yields its row (fair share)" in stack.logs()


def test_a_whole_answer_is_generated_in_the_running_batch_too(stack: Stack) -> None:
    # A non-streamed request used to run as a static batch holding the compute thread until its 500 tokens
    # were done; in the decode batch a short stream sent after it finishes first.
    whole: dict[str, Any] = {}

    def ask() -> None:
        response = httpx.post(f"{stack.url}/models/{WIDE}", timeout=120,
                              headers={"Authorization": f"Bearer {stack.tokens['all']}"},
                              json={"inputs": ["The cat sees", "A dog"],
                                    "parameters": {"max_new_tokens": 500, "do_sample": False}})
        whole.update(status=response.status_code, body=response.json(), ended=time.perf_counter())

    asker = threading.Thread(target=ask)
    asker.start()
    wait_until(lambda: "decode batch for" in stack.logs() or bool(whole), 30, "the decode batch to start")
    time.sleep(0.3)
    short = Generation(stack, WIDE, 4)
    short.start()
    short.join(60)
    asker.join(120)
    assert short.error is None and short.finish_reason == "length" and short.ended_at is not None
    assert whole["status"] == 200 and len(whole["body"]) == 2, whole
    assert all(answer[0]["generated_text"].startswith(prompt)  # the pipeline's shape: the prompt and the rest
               for answer, prompt in zip(whole["body"], ("The cat sees", "A dog")))
    assert short.ended_at < whole["ended"]
