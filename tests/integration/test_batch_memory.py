"""Batches sized to a small memory budget, the fit against measured peaks, and out-of-memory batches split, not failed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import exhausting_runner, model_factory
from tests.stack import Stack, http_json, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.one_phase]

# The demo model's encoder with a classifier head (tiny models' peaks are allocator noise), on torch:
# ONNX Runtime's arena grows by powers of two and keeps what it took, so its peaks are steps, not shapes.
CAPPED = "minilm-cls"
OOM = "tiny-oom"
MINILM_BYTES = 120 * 2**20  # about what MiniLM adds to a worker (measured at load: 90-130 MiB here)
BATCH_ROOM = 80 * 2**20  # what the budget leaves for batches over the resting worker
FAKE_OOM_TOKENS = 64  # the tiny model's worker fails like an exhausted allocator over this many padded tokens
EXHAUSTING_RUNNER = "tests.exhausting_runner.ExhaustingRunner"
# Shapes beyond every warm-up shape (padded tokens over 2 x 512), in increasing size, so each is
# measured and predicted before the fit has seen it: (items, tokens per input).
HELD_OUT = [(3, 400), (6, 250), (16, 120), (10, 256), (24, 128)]
TOLERANCE = 0.5  # see the held-out test
BURST = 32  # long inputs sent at once
LONG = 400  # tokens


def text(tokens: int, word: str = "hello") -> str:
    """An input of exactly tokens tokens (one per word, plus the two special tokens)."""
    return " ".join([word] * (tokens - 2))


def _memory(stack: Stack, model: str) -> dict:
    status, _, body = http_json("GET", f"{stack.url}/models/{model}", token=stack.tokens["all"])
    assert status == 200, body
    return body["tasks"][0]["memory"] or {}


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """MiniLM classifier on a worker whose budget leaves BATCH_ROOM for batches; a tiny model on a failing allocator."""
    tiny = model_factory.build_sequence_classifier(Path(tmp_path_factory.mktemp("oom")) / "cls")
    started = time.monotonic()
    with Stack.started() as stack:
        stacked = time.monotonic()
        stack.manage("register_model", CAPPED, "--source", str(model_factory.minilm_path()), "--task",
                     "text-classification", "--backend", "torch", "--max-batch-size", "32", "--max-batch-delay-ms", "50",
                     "--max-request-tokens", "100000", "--timeout", "120")
        stack.manage("register_model", OOM, "--source", str(tiny), "--task", "text-classification",
                     "--max-batch-size", "8", "--max-batch-delay-ms", "50", "--timeout", "60")
        stack.create_token("all")
        stack.start_worker(env={"HOSTING_WORKER_MODELS": OOM, "HOSTING_MODEL_RUNNER": EXHAUSTING_RUNNER,
                                exhausting_runner.LIMIT_ENV: str(FAKE_OOM_TOKENS)})
        stack.start_web()
        stack.wait_ready([OOM])
        ready = time.monotonic()
        # The budget: a resting worker (measured by the first one, which holds a tiny model), MiniLM's
        # size, and BATCH_ROOM; the tests read what the worker reports it has left for batches.
        first = _memory(stack, OOM)
        budget = first["budget_bytes"] - first["available_bytes"] + MINILM_BYTES + BATCH_ROOM
        stack.start_worker(env={"HOSTING_WORKER_MODELS": CAPPED, "HOSTING_WORKER_MEMORY_BYTES": str(budget)})
        stack.wait_ready([CAPPED])
        print(f"\nset-up {time.monotonic() - started:.0f}s (stack {stacked - started:.0f}s, first workers "
              f"{ready - stacked:.0f}s)")
        yield stack


def test_the_fit_predicts_peaks_of_shapes_it_has_not_seen(capped: Stack) -> None:
    warm_up = {(b["items"], b["longest"]) for b in _memory(capped, CAPPED)["recent_batches"]}
    for items, tokens in HELD_OUT:
        for _ in range(2):  # a shape's first run builds its kernels and is not measured; the second is
            status, _, body = http_json("POST", f"{capped.url}/models/{CAPPED}", {"inputs": [text(tokens)] * items},
                                        token=capped.tokens["all"])
            assert status == 200, body

    def held_out() -> list[dict]:
        batches = _memory(capped, CAPPED)["recent_batches"]
        return [b for b in batches if (b["items"], b["longest"]) not in warm_up and b["predicted_bytes"]]

    # Each request is one batch, or two where the cap splits it: all of them shapes the fit never saw.
    batches = wait_until(lambda: len(held_out()) >= len(HELD_OUT) and held_out(), 10, "the held-out batches")
    memory = _memory(capped, CAPPED)
    print(f"\nfit {memory['coefficients']} (max relative error on its samples {memory['max_relative_error']})")
    print(f"{'items':>5} {'tokens':>6} {'predicted MiB':>13} {'measured MiB':>12} {'error':>7}")
    errors = []
    for batch in batches:
        error = (batch["predicted_bytes"] - batch["measured_bytes"]) / batch["measured_bytes"]
        errors.append(error)
        print(f"{batch['items']:>5} {batch['longest']:>6} {batch['predicted_bytes'] / 2**20:>13.1f} "
              f"{batch['measured_bytes'] / 2**20:>12.1f} {error:>+7.1%}")
    # The target is 20%. Misses of 31-57% here were measurements, not the fit: batches measured in the compute
    # thread's allocator arena landed on blocks unmeasured batches had freed, peaking 1.3-2 times their own
    # (peak_memory.PeakProbe). Measured in an arena of their own, held-out shapes are within 2.0% on this shared
    # 2-core box, quiet or beside two busy loops; the bound is kept loose, the printed table is the figure.
    assert all(abs(error) <= TOLERANCE for error in errors), errors


def test_a_long_input_burst_runs_in_batches_capped_to_the_budget(capped: Stack) -> None:
    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=120, headers={"Authorization": f"Bearer {capped.tokens['all']}"}) as client:
            return await asyncio.gather(*(client.post(f"{capped.url}/models/{CAPPED}",
                                                      json={"inputs": text(LONG, f"w{n % 7}")}) for n in range(BURST)))

    responses = asyncio.run(burst())
    assert [r.status_code for r in responses] == [200] * BURST, [r.text for r in responses if r.status_code != 200][:3]
    sizes = [int(r.headers["X-Batch-Size"]) for r in responses]
    memory = _memory(capped, CAPPED)
    cap_items = memory["cap_tokens"] // LONG
    print(f"\nburst of {BURST} x {LONG} tokens: batch sizes {sorted(set(sizes))}, cap {memory['cap_tokens']} padded "
          f"tokens ({cap_items} inputs), {memory['available_bytes'] / 2**20:.0f} MiB for batches")
    assert 2 <= max(sizes) < 32  # batched, but well under max_batch_size
    assert max(sizes) <= cap_items + 1
    for batch in memory["recent_batches"]:
        assert batch["measured_bytes"] <= memory["available_bytes"] * 1.1


def test_an_out_of_memory_batch_is_split_and_only_an_input_too_large_alone_is_refused(capped: Stack) -> None:
    inputs = [text(30, f"w{n}") for n in range(8)]  # 8 x 30 = 240 padded tokens: fails until split to 2 x 30
    status, headers, body = http_json("POST", f"{capped.url}/models/{OOM}", {"inputs": inputs},
                                      token=capped.tokens["all"])
    assert status == 200, body
    assert len(body) == 8 and all(isinstance(answer, list) for answer in body)

    status, _, body = http_json("POST", f"{capped.url}/models/{OOM}", {"inputs": text(100)},
                                token=capped.tokens["all"])
    assert status == 413, body
    assert body["error_type"] == "too_large" and "needs more memory" in body["error"], body

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {capped.tokens['all']}"}) as client:
            return await asyncio.gather(*(client.post(f"{capped.url}/models/{OOM}", json={"inputs": text(30, f"b{n}")})
                                          for n in range(16)))

    assert [r.status_code for r in asyncio.run(burst())] == [200] * 16
    memory = _memory(capped, OOM)
    assert memory["ooms"] >= 3 and memory["oom_ceiling_tokens"] < 240
