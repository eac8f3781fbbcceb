"""TGI streaming on the real stack: events token by token from the worker, through Redis, to the client."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import model_factory
from tests.stack import Stack, http_json, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.one_phase]

GPT2, BART, CLS = "long-gpt2", "tiny-bart", "tiny-cls"
PROMPT = "The cat sees"


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny GPT-2 with 1,024 positions (generations long enough to interrupt), BART, a classifier."""
    root = tmp_path_factory.mktemp("stream-models")
    return {GPT2: model_factory.build_tiny_gpt2(root / "gpt2", positions=1024),
            BART: model_factory.build_tiny_seq2seq(root / "bart"),
            CLS: model_factory.build_sequence_classifier(root / "cls")}


@pytest.fixture(scope="module")
def stack(tiny_models: dict[str, Path]) -> Iterator[Stack]:
    """Generation models on a stack of their own: the session stack's schema fuzzing stays off them."""
    with Stack.started() as running:
        running.manage("register_model", GPT2, "--source", str(tiny_models[GPT2]), "--task", "text-generation",
                       "--max-batch-size", "8", "--timeout", "60")
        running.manage("register_model", BART, "--source", str(tiny_models[BART]), "--task",
                       "text2text-generation", "--timeout", "60")
        running.manage("register_model", CLS, "--source", str(tiny_models[CLS]), "--task", "text-classification")
        running.create_token("all")
        limited = running.manage("create_api_token", "two-a-minute", "--requests-per-minute", "2")
        running.tokens["two-a-minute"] = limited.strip().splitlines()[-1]
        running.start_worker()
        running.start_web()
        running.wait_ready([GPT2, BART, CLS])
        yield running


@pytest.fixture(scope="module")
def token(stack: Stack) -> str:
    """A token for every model of this stack."""
    return stack.tokens["all"]


@pytest.fixture
def hub_online(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """InferenceClient refuses every call, even to 127.0.0.1, while HF_HUB_OFFLINE is on."""
    import huggingface_hub.constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    yield


@pytest.fixture(scope="module")
def greedy(tiny_models: dict[str, Path]) -> Any:
    """The tiny GPT-2's own greedy continuation, in process."""
    from transformers import pipeline

    pipe = pipeline("text-generation", model=str(tiny_models[GPT2]))
    return lambda prompt, n: pipe(prompt, max_new_tokens=n, do_sample=False, return_full_text=False)[0][
        "generated_text"]


def sse_events(stack: Stack, token: str, body: dict[str, Any], path: str = GPT2) -> tuple[httpx.Response, list[Any]]:
    """POST a streamed request: the response and its events with their arrival times."""
    events = []
    with httpx.stream("POST", f"{stack.url}/models/{path}", json=body, timeout=60,
                      headers={"Authorization": f"Bearer {token}"}) as response:
        if response.status_code != 200:
            response.read()
            return response, []
        for line in response.iter_lines():
            if line.startswith("data:"):
                events.append((time.perf_counter(), json.loads(line[5:])))
    return response, events


def test_inference_client_streams_the_models_own_tokens(stack: Stack, token: str, greedy: Any,
                                                        hub_online: None) -> None:
    from huggingface_hub import InferenceClient

    client = InferenceClient(model=f"{stack.url}/models/{GPT2}", token=token)
    expected = greedy(PROMPT, 12)
    pieces = list(client.text_generation(PROMPT, max_new_tokens=12, stream=True))
    assert "".join(pieces) == expected and len(pieces) == 12
    detailed = list(client.text_generation(PROMPT, max_new_tokens=12, stream=True, details=True))
    assert [d.token.text for d in detailed] == pieces
    last = detailed[-1]
    assert last.generated_text == expected and last.details.finish_reason == "length"
    assert last.details.generated_tokens == 12 and all(d.generated_text is None for d in detailed[:-1])
    whole = client.text_generation(PROMPT, max_new_tokens=12, details=True)  # not streamed, TGI's details
    assert whole.generated_text == expected and [t.text for t in whole.details.tokens] == pieces
    assert whole.details.generated_tokens == 12 and all(t.logprob <= 0 for t in whole.details.tokens)


def test_tokens_arrive_as_they_are_produced(stack: Stack, token: str) -> None:
    started = time.perf_counter()
    response, events = sse_events(stack, token, {"inputs": PROMPT, "stream": True,
                                                 "parameters": {"max_new_tokens": 100}})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    assert len(events) == 100 and [e["index"] for _, e in events] == list(range(1, 101))
    # Not buffered until the end: the events come in many reads spread over the generation
    # (a buffered answer arrives in one read, within microseconds). The client test below
    # proves it the other way: it hangs up after one token while the worker still generates.
    times = [t for t, _ in events]
    bursts = 1 + sum(1 for a, b in itertools.pairwise(times) if b - a > 0.001)
    assert times[-1] - times[0] > 0.02 and bursts >= 3, (times[-1] - times[0], bursts, times[0] - started)
    assert events[-1][1]["generated_text"] is not None


def test_a_client_that_leaves_stops_generation(stack: Stack, token: str) -> None:
    body = {"inputs": "A dog likes", "stream": True, "parameters": {"max_new_tokens": 500}}
    # Streams beside it keep the batch's steps longer than the tiny model's 500 tokens alone (about 0.5 s).
    beside = [threading.Thread(target=sse_events, args=(stack, token, body)) for _ in range(4)]
    for thread in beside:
        thread.start()
    with httpx.stream("POST", f"{stack.url}/models/{GPT2}", timeout=60, headers={"Authorization": f"Bearer {token}"},
                      json=body) as response:
        for line in response.iter_lines():
            if line.startswith("data:"):
                break  # one token, then hang up
    wait_until(lambda: "client gone, generation stops" in stack.logs(), 20, "the worker to stop generating")
    for thread in beside:
        thread.join(60)


def test_errors_before_the_first_byte_are_plain_json(stack: Stack, token: str) -> None:
    response, _ = sse_events(stack, token, {"inputs": "word " * 1100, "stream": True,
                                            "parameters": {"max_new_tokens": 5}})
    assert response.status_code == 400 and "positions" in response.json()["error"]
    response, _ = sse_events(stack, token, {"inputs": [PROMPT, PROMPT], "stream": True})
    assert response.status_code == 400 and "one prompt" in response.json()["error"]
    response, _ = sse_events(stack, token, {"inputs": "a", "stream": True}, path=CLS)
    assert response.status_code == 400 and "'stream' is for" in response.json()["error"]


def test_text2text_streams(stack: Stack, token: str) -> None:
    status, _, whole = http_json("POST", f"{stack.url}/models/{BART}", {
        "inputs": "The quick brown fox", "parameters": {"generate_parameters": {"max_new_tokens": 8}}}, token=token)
    assert status == 200, whole
    response, events = sse_events(stack, token, {"inputs": "The quick brown fox", "stream": True,
                                                 "parameters": {"generate_parameters": {"max_new_tokens": 8}}},
                                  path=BART)
    assert response.status_code == 200 and events
    assert events[-1][1]["generated_text"] == whole[0]["generated_text"]


def test_the_tokens_rate_limit_applies_before_the_first_byte(stack: Stack) -> None:
    limited = stack.tokens["two-a-minute"]
    body = {"inputs": PROMPT, "stream": True, "parameters": {"max_new_tokens": 3}}
    statuses = [sse_events(stack, limited, body)[0] for _ in range(3)]
    assert [r.status_code for r in statuses] == [200, 200, 429]
    assert statuses[0].headers.get("x-ratelimit-limit") == "2"
    assert statuses[2].json()["error_type"] == "rate_limited" and "retry-after" in statuses[2].headers
