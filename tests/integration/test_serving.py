"""The serving core end to end: real HTTP -> uvicorn -> Redis -> runworker -> reply."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from tests.integration.common import MiniLMReference, post_many, sentences, wrong_answers
from tests.integration.conftest import CLS, MINILM, MLM
from tests.stack import Stack, http_json

pytestmark = pytest.mark.integration

@pytest.fixture(scope="module")
def minilm_reference() -> MiniLMReference:
    """In-process reference vectors."""
    return MiniLMReference()


def test_500_distinct_inputs_at_concurrency_64_each_get_their_own_vector(stack: Stack, token: str,
                                                                        minilm_reference: Any) -> None:
    texts = sentences(500)
    answers = asyncio.run(post_many(f"{stack.url}/models/{MINILM}", token, texts, concurrency=64))
    assert len(answers) == 500
    failed = [a for a in answers if a.status != 200]
    assert not failed, f"non-200 answers: {[(a.status, a.body) for a in failed[:3]]}"
    got = np.array([a.body for a in answers], dtype=np.float32)
    assert got.shape == (500, 384)
    assert wrong_answers(answers, texts, minilm_reference) == []
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-4)
    batch_sizes = [int(a.headers["x-batch-size"]) for a in answers]
    assert max(batch_sizes) > 1, "no request was batched with another"
    assert all(float(a.headers["x-queue-time-ms"]) >= 0 and float(a.headers["x-inference-time-ms"]) > 0
               for a in answers)


def test_client_list_larger_than_a_batch_is_split_and_reassembled(stack: Stack, token: str,
                                                                  minilm_reference: Any) -> None:
    texts = sentences(75, seed=11)  # max_batch_size is 32: three batches at least
    status, headers, body = http_json("POST", f"{stack.url}/models/{MINILM}", {"inputs": texts}, token=token)
    assert status == 200, body
    got = np.array(body, dtype=np.float32)
    expected = minilm_reference(texts)
    assert got.shape == (75, 384)
    assert ((got * expected).sum(axis=1)).min() > 0.9999


def test_fill_mask_answers_the_hf_shape_and_matches_in_process(stack: Stack, token: str,
                                                              tiny_models: dict) -> None:
    from transformers import pipeline

    reference = pipeline("fill-mask", model=str(tiny_models[MLM]))
    text = "Paris is the [MASK] of France."
    status, _, body = http_json("POST", f"{stack.url}/models/{MLM}", {"inputs": text, "parameters": {"top_k": 3}},
                                token=token)
    assert status == 200, body
    assert [set(p) for p in body] == [{"score", "token", "token_str", "sequence"}] * 3
    expected = reference(text, top_k=3)
    assert [p["token"] for p in body] == [p["token"] for p in expected]
    assert body[0]["score"] == pytest.approx(expected[0]["score"], rel=1e-4)
    status, _, body = http_json("POST", f"{stack.url}/models/{MLM}",
                                {"inputs": [text, "The [MASK] is blue."]}, token=token)
    assert status == 200 and len(body) == 2 and len(body[0]) == 5 and "blue" in body[1][0]["sequence"]


def test_fill_mask_without_mask_token_is_a_clear_400(stack: Stack, token: str) -> None:
    status, _, body = http_json("POST", f"{stack.url}/models/{MLM}", {"inputs": "no mask here"}, token=token)
    assert status == 400 and body["error_type"] == "invalid_input" and "[MASK]" in body["error"]


def test_text_classification_answers_nested_label_lists(stack: Stack, token: str, tiny_models: dict) -> None:
    from transformers import pipeline

    reference = pipeline("text-classification", model=str(tiny_models[CLS]), top_k=None)
    status, _, body = http_json("POST", f"{stack.url}/models/{CLS}", {"inputs": "I love it"}, token=token)
    assert status == 200, body
    assert len(body) == 1 and {d["label"] for d in body[0]} == {"negative", "positive"}
    raw = reference("I love it")
    expected = {d["label"]: d["score"] for d in (raw[0] if isinstance(raw[0], list) else raw)}
    assert {d["label"]: d["score"] for d in body[0]} == pytest.approx(expected, rel=1e-4)
    status, _, body = http_json("POST", f"{stack.url}/models/{CLS}",
                                {"inputs": ["a", "b", "c"], "parameters": {"top_k": 1}}, token=token)
    assert status == 200 and [len(x) for x in body] == [1, 1, 1]


def test_text_plain_and_curl_form_bodies_are_one_string_input(stack: Stack, token: str) -> None:
    for content_type in ("text/plain", "application/x-www-form-urlencoded"):
        status, _, body = http_json("POST", f"{stack.url}/models/{MINILM}", b"Paris is a city.", token=token,
                                    headers={"Content-Type": content_type})
        assert status == 200 and len(body) == 384, body


@pytest.mark.parametrize(
    ("headers_token", "model", "status", "error_type"),
    [(None, MINILM, 401, "unauthorized"), ("hst_wrong", MINILM, 401, "unauthorized"),
     ("cls-only", MINILM, 403, "forbidden"), ("cls-only", CLS, 200, None)],
)
def test_auth(stack: Stack, headers_token: str | None, model: str, status: int, error_type: str | None) -> None:
    token = stack.tokens.get(headers_token, headers_token) if headers_token else None
    got, headers, body = http_json("POST", f"{stack.url}/models/{model}", {"inputs": "hello"}, token=token)
    assert got == status, body
    assert "X-Request-Id" in headers or "x-request-id" in headers
    if error_type:
        assert body["error_type"] == error_type and body["error"]


@pytest.mark.parametrize(
    ("path", "body", "status", "error_type"),
    [
        (f"/models/{MINILM}", b'{"inputs": "unclosed', 400, "invalid_input"),
        (f"/models/{MINILM}", {"inputs": 42}, 400, "invalid_input"),
        (f"/models/{MINILM}", {"inputs": ["ok", 3]}, 400, "invalid_input"),
        (f"/models/{MINILM}", {"inputs": []}, 400, "invalid_input"),
        (f"/models/{MINILM}", {"text": "hi"}, 400, "invalid_input"),
        (f"/models/{CLS}", {"inputs": "hi", "parameters": {"temperature": 1}}, 400, "invalid_input"),
        (f"/models/{MLM}", {"inputs": "a [MASK]", "parameters": {"top_k": "five"}}, 400, "invalid_input"),
        (f"/models/{MINILM}", b"\xff\xfe\xfa", 400, "invalid_input"),
        ("/models/no-such-model", {"inputs": "hi"}, 404, "not_found"),
        (f"/models/{MINILM}/no-such-task", {"inputs": "hi"}, 404, "not_found"),
        (f"/models/{MINILM}", {"inputs": ["x"] * 1000}, 413, "too_large"),
        (f"/models/{MINILM}", {"inputs": "x" * (1024 * 1024 + 10)}, 413, "too_large"),
    ],
)
def test_bad_requests_get_clear_errors(stack: Stack, token: str, path: str, body: Any, status: int,
                                       error_type: str) -> None:
    got, _, answer = http_json("POST", stack.url + path, body, token=token)
    assert got == status, answer
    assert answer["error_type"] == error_type and isinstance(answer["error"], str) and answer["error"]
    assert "Traceback" not in answer["error"]


def test_named_task_route_and_model_listing(stack: Stack, token: str) -> None:
    status, _, body = http_json("POST", f"{stack.url}/models/{CLS}/text-classification", {"inputs": "x"}, token=token)
    assert status == 200 and isinstance(body[0], list)
    status, _, listing = http_json("GET", f"{stack.url}/models", token=token)
    assert status == 200
    states = {m["name"]: m["state"] for m in listing["models"]}
    # Every model of the session stack is listed and ready (other modules add their own to it).
    assert {MINILM, MLM, CLS} <= set(states) and set(states.values()) == {"ready"}, states
    status, _, detail = http_json("GET", f"{stack.url}/models/{MINILM}", token=token)
    assert status == 200 and detail["tasks"][0]["max_batch_size"] == 32
    assert detail["tasks"][0]["queue_depth"] >= 0 and detail["workers"]


def test_health_and_ready_need_no_token(stack: Stack) -> None:
    assert http_json("GET", f"{stack.url}/health")[0] == 200
    status, _, body = http_json("GET", f"{stack.url}/ready")
    assert status == 200 and body["status"] == "ready" and body["checks"]["models_ready_count"] >= 1
    status, _, body = http_json("GET", f"{stack.url}/ready", token=stack.tokens["all"])  # names: to a token
    assert status == 200 and MINILM in body["checks"]["models_ready"]


@pytest.mark.parametrize(
    "parameters",
    [{"targets": "  "}, {"targets": ["\u200b"]}, {"targets": ["\u0000"]}, {"targets": ["\u00a0"]}],
)
def test_fill_mask_targets_that_tokenize_to_nothing_are_a_400(stack: Stack, token: str, parameters: dict) -> None:
    status, _, body = http_json("POST", f"{stack.url}/models/{MLM}", {"inputs": "a [MASK] b", "parameters": parameters},
                                token=token)
    assert status == 400 and body["error_type"] == "invalid_input", body


def test_fill_mask_input_longer_than_the_model_is_a_400(stack: Stack, token: str) -> None:
    status, _, body = http_json("POST", f"{stack.url}/models/{MLM}", {"inputs": "word " * 3000 + "[MASK]"},
                                token=token)
    assert status == 400 and body["error_type"] == "invalid_input" and "tokens" in body["error"], body
    status, _, _ = http_json("POST", f"{stack.url}/models/{MLM}", {"inputs": "still [MASK] fine"}, token=token)
    assert status == 200


def test_metrics_only_answers_get(stack: Stack) -> None:
    status, headers, _ = http_json("POST", f"{stack.url}/metrics", {})
    assert status == 405 and "GET" in {k.lower(): v for k, v in headers.items()}["allow"]


def test_a_bad_input_fails_only_its_own_request_in_a_shared_batch(stack: Stack, token: str) -> None:
    async def burst() -> list:
        import httpx

        async with httpx.AsyncClient(timeout=60) as client:
            async def one(i: int) -> tuple[int, int]:
                text = "no mask at all" if i % 4 == 0 else f"item {i} is a [MASK] here"
                response = await client.post(f"{stack.url}/models/{MLM}", json={"inputs": text},
                                             headers={"Authorization": f"Bearer {token}"})
                return i, response.status_code

            return await asyncio.gather(*(one(i) for i in range(32)))

    results = asyncio.run(burst())
    assert {i: s for i, s in results if i % 4 == 0} == {i: 400 for i in range(0, 32, 4)}
    assert all(s == 200 for i, s in results if i % 4)
