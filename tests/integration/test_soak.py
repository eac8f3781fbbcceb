"""Memory soak: 20,000 requests, a tenth of them timing out, and the web process stays flat."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import model_factory
from tests.integration.common import post_many
from tests.stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.one_phase]

FAST = "soak-cls"
SLOW = "soak-emb"
TOTAL = 20_000
ROUNDS = 10


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def soak_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A fast tiny classifier, and an embedding task whose 0.1 s timeout long inputs always miss."""
    with Stack.started() as stack:
        classifier = model_factory.build_sequence_classifier(tmp_path_factory.mktemp("soak") / "cls")
        stack.manage("register_model", FAST, "--source", str(classifier), "--task", "text-classification",
                     "--max-batch-size", "64", "--max-queue-size", "4096")
        stack.manage("register_model", SLOW, "--source", str(model_factory.minilm_path()), "--task",
                     "feature-extraction", "--timeout", "0.1", "--max-queue-size", "100000")
        stack.create_token("all")
        stack.start_worker()
        stack.start_web()
        stack.wait_ready([FAST, SLOW])
        yield stack


def test_web_memory_stays_flat_over_20000_requests_with_a_tenth_timing_out(soak_stack: Stack) -> None:
    web_pid = soak_stack.web[0][0].pid
    token = soak_stack.tokens["all"]
    long_text = " ".join(["timeout"] * 300)
    per_round = TOTAL // ROUNDS
    rss: list[int] = []
    counts: dict[int, int] = {}
    for round_index in range(ROUNDS):
        fast = [f"soak {round_index} {i}" for i in range(per_round * 9 // 10)]
        slow = [long_text] * (per_round // 10)

        async def both() -> list:
            return list(await asyncio.gather(
                post_many(f"{soak_stack.url}/models/{FAST}", token, fast, concurrency=48),
                post_many(f"{soak_stack.url}/models/{SLOW}", token, slow, concurrency=16),
            ))

        fast_answers, slow_answers = asyncio.run(both())
        for answer in fast_answers + slow_answers:
            counts[answer.status] = counts.get(answer.status, 0) + 1
        assert all(a.status == 200 for a in fast_answers), {(a.status, str(a.body)[:200]) for a in fast_answers if a.status != 200}
        assert all(a.status in (200, 504) for a in slow_answers), {a.status for a in slow_answers}
        rss.append(_rss_kib(web_pid))
    assert sum(counts.values()) == TOTAL
    assert counts.get(504, 0) >= TOTAL // 20, counts  # at least half of the slow tenth timed out
    baseline = rss[1]  # after a warm-up round: imports, caches, pools
    print(f"web RSS KiB per round: {rss}; answers: {counts}")
    assert max(rss[2:]) <= baseline * 1.10, rss
