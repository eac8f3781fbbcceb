"""The openai SDK drives batch jobs end to end against the session stack (real workers)."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import numpy as np
import pytest
from openai import OpenAI

from tests.integration.common import sentences
from tests.integration.conftest import CLS, MINILM
from tests.stack import Stack, http_json

pytestmark = pytest.mark.integration


def _client(stack: Stack, token: str) -> OpenAI:
    return OpenAI(base_url=stack.url + "/v1", api_key=token, max_retries=0, timeout=30)


def _jsonl(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def _wait(client: OpenAI, batch_id: str, statuses: tuple[str, ...], timeout_s: float = 90) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in statuses or time.monotonic() > deadline:
            return batch
        time.sleep(0.2)


def _requests_today(stack: Stack, token_name: str) -> int:
    """Requests the token made today, from the usage counters its rate limits keep in Redis."""
    code = ("from channels.layers import get_channel_layer; from models_registry.models import ApiToken; "
            "from models_registry.policy.usage import token_usage; "
            f"t = ApiToken.objects.get(name={token_name!r}); print(token_usage([t.id])[t.id][0].requests)")
    return int(stack.manage("shell", "-c", code).strip().splitlines()[-1])


def _records(client: OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(line) for line in client.files.content(file_id).content.splitlines()]


def test_the_openai_sdk_runs_an_embeddings_batch(stack: Stack, token: str) -> None:
    texts = sentences(60, seed=16)
    rows = [{"custom_id": f"q-{i}", "method": "POST", "url": "/v1/embeddings",
             "body": {"model": MINILM, "input": text, "encoding_format": "float"}} for i, text in enumerate(texts)]
    rows.append({"custom_id": "bad", "method": "POST", "url": "/v1/embeddings", "body": {"model": MINILM, "input": []}})
    client = _client(stack, token)
    requests_before = _requests_today(stack, "all")
    uploaded = client.files.create(file=("corpus.jsonl", io.BytesIO(_jsonl(rows))), purpose="batch")
    assert uploaded.purpose == "batch" and uploaded.bytes == len(_jsonl(rows))
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h",
                                  metadata={"corpus": "test"})
    assert batch.status == "validating" and batch.metadata == {"corpus": "test"}
    batch = _wait(client, batch.id, ("completed", "failed"))
    assert batch.status == "completed", batch
    assert (batch.request_counts.total, batch.request_counts.completed, batch.request_counts.failed) == (61, 60, 1)
    assert batch.in_progress_at and batch.finalizing_at and batch.completed_at
    output = _records(client, batch.output_file_id)
    errors = _records(client, batch.error_file_id)
    assert [r["custom_id"] for r in output] == [f"q-{i}" for i in range(60)]
    assert [(r["custom_id"], r["response"]["status_code"], r["error"]["code"]) for r in errors] == \
        [("bad", 400, "invalid_input")]
    # Each answer is what the same request sent alone gets (a sample, over HTTP).
    for i in (0, 17, 59):
        alone = client.embeddings.create(model=MINILM, input=texts[i], encoding_format="float")
        batched = output[i]["response"]["body"]
        assert batched["object"] == "list" and batched["model"] == MINILM
        assert batched["usage"] == alone.usage.model_dump()
        np.testing.assert_allclose(batched["data"][0]["embedding"], alone.data[0].embedding, atol=1e-5)
    assert batch.id in [b.id for b in client.batches.list(limit=100)]
    # The token's usage (what its quotas are checked against) counts every job line.
    assert _requests_today(stack, "all") - requests_before >= len(rows)


def test_cancel_stops_a_batch_within_seconds(stack: Stack, token: str) -> None:
    rows = [{"custom_id": f"c-{i}", "method": "POST", "url": f"/models/{CLS}", "body": {"inputs": f"line {i}"}}
            for i in range(3000)]
    client = _client(stack, token)
    uploaded = client.files.create(file=("many.jsonl", io.BytesIO(_jsonl(rows))), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint=f"/models/{CLS}", completion_window="24h")
    _wait(client, batch.id, ("in_progress",), timeout_s=20)
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled")
    started = time.monotonic()
    batch = _wait(client, batch.id, ("cancelled",), timeout_s=20)
    assert batch.status == "cancelled" and time.monotonic() - started < 10
    output = _records(client, batch.output_file_id)
    errors = _records(client, batch.error_file_id)
    assert sorted(r["custom_id"] for r in output + errors) == sorted(r["custom_id"] for r in rows)
    assert {r["error"]["code"] for r in errors} == {"batch_cancelled"} and len(output) < len(rows)
    assert batch.request_counts.completed == len(output) and batch.request_counts.failed == len(errors)


def test_files_and_batches_are_private_to_their_token(stack: Stack, token: str) -> None:
    rows = [{"custom_id": "only", "method": "POST", "url": f"/models/{CLS}", "body": {"inputs": "hi"}}]
    uploaded = _client(stack, token).files.create(file=("one.jsonl", io.BytesIO(_jsonl(rows))), purpose="batch")
    other = stack.tokens["cls-only"]
    status, _, body = http_json("GET", f"{stack.url}/v1/files/{uploaded.id}", token=other)
    assert status == 404 and body["error"]["code"] == "not_found"
    status, _, body = http_json("GET", f"{stack.url}/v1/files/{uploaded.id}/content")
    assert status == 401
