"""A worker killed mid-generation: every chat it was generating is answered, and other models go on."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests import model_factory
from tests.stack import Stack, http_json, wait_until

pytestmark = pytest.mark.integration

CHAT, OTHER = "dying-chat", "other-chat"  # the same tiny GPT-2, registered twice: another tenant's model
TOKENS = 500


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Two workers serving both models."""
    path = model_factory.build_tiny_gpt2(tmp_path_factory.mktemp("death") / "gpt2", positions=1024,
                                         chat_template=model_factory.CHAT_TEMPLATE)
    with Stack.started() as running:
        for name in (CHAT, OTHER):
            running.manage("register_model", name, "--source", str(path), "--task", "text-generation",
                           "--max-batch-size", "16", "--timeout", "60")
        running.create_token("all")
        running.create_token("tenant")
        running.start_worker()
        running.start_worker()
        running.start_web()
        running.wait_ready([CHAT, OTHER])

        def both_serve() -> bool:
            status, _, body = http_json("GET", f"{running.url}/models/{CHAT}", token=running.tokens["all"])
            return status == 200 and len([w for w in body["workers"] if w["state"] == "ready"]) == 2

        wait_until(both_serve, 90, "both workers ready")
        yield running


class Chat(threading.Thread):
    """One chat (streamed or whole) in a thread: its status, text, finish reason and when it ended."""

    def __init__(self, stack: Stack, model: str, tokens: int, stream: bool, token: str = "all",
                 logprobs: bool = False) -> None:
        super().__init__(daemon=True)
        self.stack, self.model, self.tokens, self.stream, self.token = stack, model, tokens, stream, token
        self.logprobs = logprobs
        self.status = 0
        self.text = ""
        self.finish_reason: str | None = None
        self.error_message = ""
        self.streaming = threading.Event()
        self.started_at = 0.0
        self.ended_at = 0.0

    def body(self) -> dict[str, Any]:
        body = {"model": self.model, "max_tokens": self.tokens, "temperature": 0, "stream": self.stream,
                "messages": [{"role": "user", "content": "The cat sees"}]}
        return {**body, "logprobs": True} if self.logprobs else body

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.stack.tokens[self.token]}"}
        url = f"{self.stack.url}/v1/chat/completions"
        self.started_at = time.perf_counter()
        try:
            if not self.stream:
                response = httpx.post(url, json=self.body(), headers=headers, timeout=120)
                self.status = response.status_code
                answer = response.json()
                if self.status == 200:
                    self.text = answer["choices"][0]["message"]["content"] or ""
                    self.finish_reason = answer["choices"][0]["finish_reason"]
                else:
                    self.error_message = answer["error"]["message"]
                return
            with httpx.stream("POST", url, json=self.body(), headers=headers, timeout=120) as response:
                self.status = response.status_code
                if self.status != 200:
                    self.error_message = json.loads(response.read())["error"]["message"]
                    return
                for line in response.iter_lines():
                    if not line.startswith("data: {"):
                        continue
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        self.error_message = chunk["error"]["message"]
                        continue
                    for choice in chunk["choices"]:
                        self.text += choice["delta"].get("content") or ""
                        self.finish_reason = choice["finish_reason"] or self.finish_reason
                        if self.text:
                            self.streaming.set()
        finally:
            self.ended_at = time.perf_counter()
            self.streaming.set()


@pytest.mark.one_phase
def test_chats_through_a_worker_kill_are_answered_in_full_or_told_to_retry(stack: Stack) -> None:
    reference = Chat(stack, CHAT, TOKENS, stream=False)
    reference.run()
    assert reference.status == 200 and reference.finish_reason == "length", reference.error_message
    chats = [Chat(stack, CHAT, TOKENS, stream=index % 2 == 0) for index in range(16)]
    # Logprobs are the decode batch's alone: one redelivered is told to send again, never refused with a 400.
    with_logprobs = [Chat(stack, CHAT, TOKENS, stream=False, logprobs=True) for _ in range(4)]
    for chat in chats + with_logprobs:
        chat.start()
    assert all(chat.streaming.wait(60) for chat in chats if chat.stream)
    victim = stack.workers[0]
    victim.send_signal(signal.SIGKILL)
    killed_at = time.perf_counter()
    assert victim.wait(10) == -signal.SIGKILL
    short = Chat(stack, OTHER, 4, stream=False, token="tenant")
    short.run()
    for chat in chats + with_logprobs:
        chat.join(120)
        assert not chat.is_alive()
    outcomes = [(c.stream, c.status, c.finish_reason, c.error_message[:60], round(c.ended_at - killed_at, 1))
                for c in chats]
    assert short.status == 200, short.error_message
    assert short.ended_at - short.started_at < 2.0
    # The dead worker's chats were taken again by the other: whole answers start over unseen; a stream goes
    # on once the new generation repeated what its client has (greedy: it does), else ends with a retry error.
    assert "messages of a dead worker" in stack.logs()
    assert all(c.status == 200 and c.finish_reason == "length" and c.text == reference.text
               for c in chats if not c.stream), outcomes
    for chat in (c for c in chats if c.stream):
        assert chat.text == reference.text or "send the request again" in chat.error_message, outcomes
    for chat in with_logprobs:
        assert (chat.status == 200 and chat.text == reference.text) or (
            chat.status == 503 and "send the request again" in chat.error_message), (chat.status, chat.error_message)
