"""Twelve models, two workers holding three each: models load on demand, idle ones are evicted, nothing is lost."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import model_factory
from tests.stack import Stack, http_json, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.one_phase]

MODELS = [f"cls-{i:02d}" for i in range(12)]
PER_WORKER = 3
REQUESTS = 200  # the run is bounded by this many requests and by RUN_S, whichever comes first
RUN_S = 20.0
CONCURRENCY = 8


def _labels(name: str) -> tuple[str, str]:
    return f"{name}-neg", f"{name}-pos"


def _copies(root: Path) -> dict[str, Path]:
    """One tiny random classifier, copied per model with its own labels: an answer names the model that computed it."""
    base = model_factory.build_sequence_classifier(root / "base")
    copies = {}
    for name in MODELS:
        dest = root / name
        shutil.copytree(base, dest)
        config = json.loads((dest / "config.json").read_text())
        config["id2label"] = {str(i): label for i, label in enumerate(_labels(name))}
        config["label2id"] = {label: i for i, label in enumerate(_labels(name))}
        (dest / "config.json").write_text(json.dumps(config))
        copies[name] = dest
    return copies

OPERATOR = "operator-secret"  # HOSTING_METRICS_TOKEN: sees which worker holds what


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """12 registered models, 2 workers with HOSTING_MAX_LOADED_MODELS=3."""
    copies = _copies(tmp_path_factory.mktemp("placement"))
    with Stack.started(extra_env={"HOSTING_METRICS_TOKEN": OPERATOR}) as stack:
        calls = "; ".join(f"call_command('register_model', {name!r}, '--source', {str(path)!r}, '--task', "
                          f"'text-classification', '--max-batch-size', '8', '--timeout', '60')"
                          for name, path in copies.items())
        stack.manage("shell", "-c", f"from django.core.management import call_command; {calls}")  # one start-up, not 12
        stack.create_token("all")
        for _ in range(2):
            stack.start_worker(env={"HOSTING_MAX_LOADED_MODELS": str(PER_WORKER)})
        stack.start_web()
        wait_until(lambda: _ready_models(stack), 120, "a first model ready")
        yield stack


def _models(stack: Stack) -> list[dict]:
    status, _, body = http_json("GET", stack.url + "/models", token=stack.tokens["all"], timeout=5)
    assert status == 200, body
    return body["models"]


def _ready_models(stack: Stack) -> list[str]:
    return [m["name"] for m in _models(stack) if m["state"] == "ready"]


async def _traffic(url: str, token: str) -> list[tuple[str, int, object, float]]:
    """Mixed traffic over all twelve models: (model, status, body, seconds) per request."""
    rng = random.Random(22)
    plan = [rng.choice(MODELS) for _ in range(REQUESTS)]
    stop_at = time.monotonic() + RUN_S
    answers: list[tuple[str, int, object, float]] = []
    queue = asyncio.Queue()
    for item in plan:
        queue.put_nowait(item)

    async with httpx.AsyncClient(timeout=90, headers={"Authorization": f"Bearer {token}"}) as client:
        async def client_loop(n: int) -> None:
            while not queue.empty() and time.monotonic() < stop_at:
                model = queue.get_nowait()
                started = time.perf_counter()
                try:
                    response = await client.post(f"{url}/models/{model}", json={"inputs": f"request to {model} {n}"})
                    answers.append((model, response.status_code, response.json(), time.perf_counter() - started))
                except httpx.HTTPError as error:
                    answers.append((model, 0, repr(error), time.perf_counter() - started))

        await asyncio.gather(*(client_loop(n) for n in range(CONCURRENCY)))
    return answers


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def test_models_not_loaded_are_loadable_on_demand_not_unserved(fleet: Stack) -> None:
    models = _models(fleet)
    states = {m["name"]: m["state"] for m in models}
    assert set(states.values()) <= {"ready", "available", "loading"}, states
    assert sum(state == "ready" for state in states.values()) <= 2 * PER_WORKER
    status, _, ready = http_json("GET", fleet.url + "/ready", token=fleet.tokens["all"])
    assert status == 200, ready
    assert ready["checks"]["models_not_served"] == []
    shown = set(ready["checks"]["models_ready"]) | set(ready["checks"]["models_loadable_on_demand"])
    assert shown | {n for n, s in states.items() if s == "loading"} == set(MODELS)


def test_mixed_traffic_over_twelve_models_is_answered_correctly_with_loads_and_evictions(fleet: Stack) -> None:
    started = time.monotonic()
    answers = asyncio.run(_traffic(fleet.url, fleet.tokens["all"]))
    elapsed = time.monotonic() - started
    failures = [(model, status, body) for model, status, body, _ in answers if status != 200]
    assert not failures, failures[:5]
    for model, _, body, _ in answers:  # the model asked for computed it: its own labels
        assert {entry["label"] for entry in body[0]} == set(_labels(model)), (model, body)
    assert len({model for model, *_ in answers}) == len(MODELS)

    loads, evictions, load_seconds, held = 0, 0, [], {}
    for name in MODELS:
        status, _, detail = http_json("GET", f"{fleet.url}/models/{name}", token=OPERATOR)  # workers' inside
        assert status == 200, detail
        for worker in detail["workers"]:
            loads += worker.get("loads", 0)
            evictions += worker.get("evictions", 0)
            load_seconds += worker.get("recent_load_seconds", [])
            if worker["state"] == "ready":
                held[worker["worker"]] = held.get(worker["worker"], 0) + 1
        assert detail["state"] in ("ready", "available", "loading")
    assert all(count <= PER_WORKER for count in held.values()), held
    assert loads >= len(MODELS) and evictions >= len(MODELS) - 2 * PER_WORKER

    status, _, metrics = http_json("GET", fleet.url + "/metrics", token=OPERATOR)
    assert "hosting_model_loads_total{" in metrics and "hosting_model_evictions_total{" in metrics
    assert "hosting_model_load_seconds_bucket{" in metrics

    latencies = [seconds for *_, seconds in answers]
    print(f"\n{len(answers)} requests over {len(MODELS)} models in {elapsed:.1f}s, 2 workers x {PER_WORKER} models: "
          f"all 200; loads {loads}, evictions {evictions}")
    print(f"cold start (load to ready, worker side): p50 {_percentile(load_seconds, 0.5):.3f}s "
          f"p99 {_percentile(load_seconds, 0.99):.3f}s max {max(load_seconds):.3f}s over {len(load_seconds)} loads")
    print(f"client latency: p50 {statistics.median(latencies):.3f}s p99 {_percentile(latencies, 0.99):.3f}s "
          f"max {max(latencies):.3f}s")
