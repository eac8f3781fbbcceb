"""/metrics on the real stack: every SPEC metric, with model/task labels, counting real requests."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.common import sentences
from tests.integration.conftest import CLS, MINILM
from tests.stack import Stack, http_json, wait_until

pytestmark = pytest.mark.integration

OFF = "metrics-off"  # registered, then disabled: every request to it is refused as unavailable
FE = "feature-extraction"
Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(stack: Stack) -> Samples:
    """Every sample of /metrics by sample name: [(labels, value)]."""
    status, headers, text = http_json("GET", f"{stack.url}/metrics")
    content_type = {k.lower(): v for k, v in headers.items()}.get("content-type", "")
    assert status == 200 and content_type.startswith("text/plain"), (status, headers)
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples of name whose labels include labels (0 when none)."""
    return sum(v for got, v in samples.get(name, []) if all(got.get(k) == want for k, want in labels.items()))


def labelled(samples: Samples, name: str, **labels: str) -> bool:
    """Whether some sample of name carries labels."""
    return any(all(got.get(k) == want for k, want in labels.items()) for got, _ in samples.get(name, []))


async def burst(url: str, token: str, count: int, texts: list[str] | None = None) -> list[int]:
    """count concurrent inference requests (of texts, else short sentences); their status codes."""
    texts = texts or [f"sentence number {i} about metrics and batches" for i in range(count)]
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:
        async def one(i: int) -> int:
            response = await client.post(url, json={"inputs": texts[i % len(texts)]},
                                         headers={"Authorization": f"Bearer {token}"})
            return response.status_code

        return await asyncio.gather(*(one(i) for i in range(count)))


async def keep_busy(url: str, token: str, clients: int, texts: list[str], until: threading.Event) -> list[int]:
    """clients concurrent loops, each posting the next of texts as soon as its answer came, until until is set;
    every status code."""
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    statuses: list[int] = []
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:
        async def one(first: int) -> None:
            for i in itertools.count(first, clients):
                if until.is_set():
                    return
                response = await client.post(url, json={"inputs": texts[i % len(texts)]},
                                             headers={"Authorization": f"Bearer {token}"})
                statuses.append(response.status_code)

        await asyncio.gather(*(one(i) for i in range(clients)))
    return statuses


@pytest.fixture(scope="module")
def disabled_model(stack: Stack, tiny_models: dict) -> Iterator[str]:
    """A disabled model, removed again afterwards so the rest of the session sees the usual three."""
    # Created disabled in one step, so no worker ever starts loading it.
    stack.manage("shell", "-c", "from models_registry.models import ModelTask, RegisteredModel; "
                                f"m = RegisteredModel.objects.create(name={OFF!r}, source={str(tiny_models[CLS])!r}, "
                                "enabled=False); ModelTask.objects.create(model=m, name='text-classification', "
                                "task='text-classification')")
    yield OFF
    stack.manage("shell", "-c", f"from models_registry.models import RegisteredModel as M; "
                                f"M.objects.filter(name={OFF!r}).delete()")
    wait_until(lambda: OFF not in [m["name"] for m in http_json(
        "GET", f"{stack.url}/models", token=stack.tokens["all"])[2]["models"]], 10, f"{OFF} gone from /models")


def test_request_counts_latencies_and_batch_sizes_follow_real_requests(stack: Stack, token: str) -> None:
    count = 64
    labels = {"model": MINILM, "task": FE}
    before = scrape(stack)
    statuses = asyncio.run(burst(f"{stack.url}/models/{MINILM}", token, count))
    assert statuses == [200] * count
    after = scrape(stack)

    def delta(name: str, **extra: str) -> float:
        return value(after, name, **labels, **extra) - value(before, name, **labels, **extra)

    assert delta("hosting_inference_requests_total") == count
    assert delta("hosting_inference_requests_total", status="200") == count
    for histogram in ("request_duration_seconds", "queue_duration_seconds", "compute_duration_seconds", "batch_size"):
        assert delta(f"hosting_inference_{histogram}_count") == count, histogram
        assert delta(f"hosting_inference_{histogram}_sum") > 0, histogram
    batched = delta("hosting_inference_batch_size_count") - delta("hosting_inference_batch_size_bucket", le="1.0")
    assert batched > 0, "no request of a concurrent burst shared its batch"
    # A request to another model does not move this model's count.
    http_json("POST", f"{stack.url}/models/{CLS}", {"inputs": "fine"}, token=token)
    assert value(scrape(stack), "hosting_inference_requests_total", **labels) == value(
        after, "hosting_inference_requests_total", **labels)


def test_every_spec_metric_is_exposed_with_model_and_task_labels(stack: Stack, token: str,
                                                                 disabled_model: str) -> None:
    status, _, _ = http_json("POST", f"{stack.url}/models/{MINILM}", {"inputs": "one more"}, token=token)
    assert status == 200

    def refused() -> bool:
        status, _, body = http_json("POST", f"{stack.url}/models/{disabled_model}", {"inputs": "x"}, token=token)
        return status == 503 and body["error_type"] == "unavailable"

    wait_until(refused, 10, "the disabled model to be refused")
    samples = scrape(stack)
    for name in ("hosting_inference_requests_total", "hosting_inference_request_duration_seconds_bucket",
                 "hosting_inference_queue_duration_seconds_bucket", "hosting_inference_compute_duration_seconds_bucket",
                 "hosting_inference_batch_size_bucket", "hosting_inference_queue_depth"):
        assert labelled(samples, name, model=MINILM, task=FE), f"{name} has no sample for {MINILM}/{FE}"
    assert value(samples, "hosting_inference_rejected_total", model=disabled_model, task="text-classification",
                 reason="unavailable") >= 1
    assert value(samples, "hosting_inference_requests_total", model=disabled_model, status="503") >= 1
    assert value(samples, "hosting_workers_alive") >= 1
    assert "django_http_requests_total_by_method_total" in samples  # django-prometheus' own metrics stay


def test_the_queue_depth_counts_items_waiting_on_a_worker_and_falls_back_to_zero(stack: Stack, token: str) -> None:
    """While clients keep more requests in flight than the worker takes, the gauge shows items waiting; then 0.

    The gauge is the worker's heartbeat (about a second old): a burst shorter than that can be
    answered before any heartbeat shows it, so the clients keep the worker busy until a scrape does.
    """
    def depth() -> float:
        return value(scrape(stack), "hosting_inference_queue_depth", model=MINILM, task=FE)

    wait_until(lambda: depth() == 0, 10, "the queue depth at 0 before the load (no earlier test's items)")
    seen = threading.Event()
    statuses: list[int] = []
    sender = threading.Thread(target=lambda: statuses.extend(asyncio.run(
        keep_busy(f"{stack.url}/models/{MINILM}", token, 128, sentences(256, seed=11), until=seen))))
    sender.start()
    try:
        wait_until(lambda: depth() > 0, 60, "the gauge to show items waiting while 128 clients keep the worker busy")
    finally:
        seen.set()
        sender.join()
    assert statuses and set(statuses) == {200}, sorted(set(statuses))
    wait_until(lambda: depth() == 0, 10, "the queue depth back at 0 once every request is answered")
