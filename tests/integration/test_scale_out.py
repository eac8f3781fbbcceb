"""Several web replicas and workers on one Redis and database: placement, sharing, rolling restarts."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import model_factory
from tests.integration.common import Answer, MiniLMReference, sentences, wrong_answers
from tests.stack import Stack, http_json, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.one_phase]

SHARED = "shared-emb"
PINNED = "pinned-cls"
OPERATOR = "operator-secret"  # HOSTING_METRICS_TOKEN: sees which worker served what


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """2 web replicas; 1 worker pinned to PINNED; 2 workers serving SHARED."""
    with Stack.started(extra_env={"HOSTING_METRICS_TOKEN": OPERATOR}) as stack:
        classifier = model_factory.build_sequence_classifier(tmp_path_factory.mktemp("cls") / "m")
        stack.manage("register_model", SHARED, "--source", str(model_factory.minilm_path()), "--task",
                     "feature-extraction", "--pooling", "mean", "--normalize", "--max-batch-size", "16",
                     "--max-queue-size", "4096", "--timeout", "60")
        stack.manage("register_model", PINNED, "--source", str(classifier), "--task", "text-classification")
        stack.create_token("all")
        stack.start_worker(env={"HOSTING_WORKER_MODELS": PINNED})
        stack.start_worker(env={"HOSTING_WORKER_MODELS": SHARED})
        stack.start_worker(env={"HOSTING_WORKER_MODELS": SHARED})
        stack.start_web()
        stack.start_web()
        stack.wait_ready([SHARED, PINNED])
        wait_until(lambda: len(_workers(stack, SHARED)) == 2, 60, "two workers serving the shared model")
        yield stack


def _workers(stack: Stack, model: str, url: str | None = None) -> list[dict]:
    status, _, body = http_json("GET", f"{url or stack.url}/models/{model}", token=OPERATOR)  # workers' inside
    assert status == 200, body
    return [w for w in body["workers"] if w["state"] == "ready"]


def _replaced(stack: Stack, before: set[str]) -> bool:
    """Two workers serve SHARED and one of them is not among before (the replacement is ready)."""
    ready = {w["worker"] for w in _workers(stack, SHARED)}
    return len(ready) == 2 and bool(ready - before)


async def _balanced(urls: list[str], token: str, path: str, texts: list[str], concurrency: int,
                    answered: threading.Semaphore | None = None) -> list[Answer]:
    """A client behind a load balancer: round robin, retry another replica if one is down.

    answered, if given, is released once per answer.
    """
    semaphore = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=concurrency * 2)) as client:
        async def one(index: int, text: str) -> Answer:
            async with semaphore:
                started = time.perf_counter()
                for attempt in range(200):
                    url = urls[(index + attempt) % len(urls)]
                    try:
                        response = await client.post(url + path, json={"inputs": text},
                                                     headers={"Authorization": f"Bearer {token}"})
                        if answered is not None:
                            answered.release()
                        return Answer(index, response.status_code, response.json(), dict(response.headers),
                                      time.perf_counter() - started)
                    except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
                        await asyncio.sleep(0.05)  # the balancer takes the replica out; try the next
                return Answer(index, 0, "no replica answered", {}, time.perf_counter() - started)

        return await asyncio.gather(*(one(i, t) for i, t in enumerate(texts)))


def test_a_pinned_model_only_reaches_its_worker(cluster: Stack) -> None:
    for _ in range(20):
        status, _, body = http_json("POST", f"{cluster.url}/models/{PINNED}", {"inputs": "pinned"},
                                    token=cluster.tokens["all"])
        assert status == 200, body
    pinned = _workers(cluster, PINNED)
    shared = {w["worker"] for w in _workers(cluster, SHARED)}
    assert len(pinned) == 1 and pinned[0]["worker"] not in shared
    wait_until(lambda: sum(_workers(cluster, PINNED)[0]["served_items"].values()) >= 20, 5, "the served count")


def test_load_is_spread_over_the_workers_of_a_model(cluster: Stack, ) -> None:
    before = {w["worker"]: sum(w["served_items"].values()) for w in _workers(cluster, SHARED)}
    urls = [f"http://127.0.0.1:{port}" for _, port in cluster.web]
    answers = asyncio.run(_balanced(urls, cluster.tokens["all"], f"/models/{SHARED}", sentences(400, seed=9), 32))
    assert [a.status for a in answers].count(200) == 400

    def shares() -> dict[str, int]:
        return {w["worker"]: sum(w["served_items"].values()) - before.get(w["worker"], 0)
                for w in _workers(cluster, SHARED)}

    wait_until(lambda: sum(shares().values()) >= 400, 15, "all items counted (the workers' heartbeats)")
    counts = shares()
    assert len(counts) == 2 and min(counts.values()) >= 400 * 0.15, counts


def test_rolling_restart_of_every_process_loses_nothing(cluster: Stack) -> None:
    reference = MiniLMReference()
    texts = sentences(1500, seed=31)
    urls = [f"http://127.0.0.1:{port}" for _, port in cluster.web]
    exit_codes: list[int] = []
    errors: list[BaseException] = []
    answered = threading.Semaphore(0)

    def roll() -> None:
        try:
            for _ in range(32):  # the load is flowing: its first answers are back
                if not answered.acquire(timeout=60):
                    raise TimeoutError("no answers to the load within 60 s")
            for index in (1, 2):  # the two shared workers, one at a time
                before = {w["worker"] for w in _workers(cluster, SHARED)}
                exit_codes.append(cluster.replace_worker(index, env={"HOSTING_WORKER_MODELS": SHARED}))
                # Two ready workers, one of them new: a count alone can be read from a view the web cached
                # before the old worker left, and then both shared workers were stopped at once (CI saw it).
                # A loaded 2-core CI box can take over a minute to start a worker and load MiniLM.
                wait_until(lambda: _replaced(cluster, before), 150, "the replacement worker ready")
            for index in range(len(cluster.web)):
                cluster.restart_web(index)
        except BaseException as error:  # reported by the test below
            errors.append(error)

    roller = threading.Thread(target=roll)
    roller.start()
    answers = asyncio.run(_balanced(urls, cluster.tokens["all"], f"/models/{SHARED}", texts, 32, answered))
    roller.join(400)
    assert not errors, errors
    assert exit_codes == [0, 0], "drained workers exit cleanly"
    statuses = [a.status for a in answers]
    assert len(answers) == 1500 and statuses.count(200) == 1500, {s: statuses.count(s) for s in set(statuses)}
    assert wrong_answers(answers, texts, reference) == []
    logs = "".join(p.read_text(errors="replace") for p in Path(cluster.workdir).glob("worker-*.log"))
    assert "draining" in logs
