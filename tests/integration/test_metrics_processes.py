"""/metrics with several web processes on one port: every scrape sees every process' counters.

`make run` starts one uvicorn process per core; `manage.py serve` points them at one
prometheus_client multiprocess directory (as this stack does), so whichever process
answers a scrape, the counters are whole for the port and never go backwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests import model_factory
from tests.stack import Stack, http_json, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.one_phase]  # no database in what it checks

CLS = "procs-cls"
REQUESTS = 60
SCRAPES = 8


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One worker, one port served by three uvicorn processes sharing a multiprocess directory."""
    root = Path(tmp_path_factory.mktemp("procs"))
    shared = root / "prometheus"
    shared.mkdir()
    with Stack.started() as running:
        running.manage("register_model", CLS, "--source", str(model_factory.build_sequence_classifier(root / "cls")),
                       "--task", "text-classification", "--timeout", "60")
        running.create_token("all")
        running.start_worker()
        running.env["PROMETHEUS_MULTIPROC_DIR"] = str(shared)  # the web processes' alone, as `serve` sets it
        try:
            running.start_web(processes=3)
        finally:
            del running.env["PROMETHEUS_MULTIPROC_DIR"]
        running.wait_ready([CLS])
        running.tokens["_shared_dir"] = str(shared)
        yield running


def scrape(stack: Stack) -> dict[str, float]:
    """{sample name with its model label: value} of one scrape (one new connection: any of the processes)."""
    status, _, text = http_json("GET", f"{stack.url}/metrics")
    assert status == 200, text
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("model") in (None, CLS) and sample.name.startswith("hosting_"):
                name = sample.name + ("{200}" if sample.labels.get("status") == "200" else "")
                found[name] = found.get(name, 0.0) + sample.value
    return found


def test_every_scrape_counts_every_processes_requests_and_never_goes_back(stack: Stack) -> None:
    for i in range(REQUESTS):  # each on a new connection: the processes share them out
        # A process that has not yet seen the model ready answers 503 (counted apart): until it has.
        wait_until(lambda: http_json("POST", f"{stack.url}/models/{CLS}", {"inputs": f"text {i}"},
                                     token=stack.tokens["all"])[0] == 200, 30, f"request {i} answered")
    previous = 0.0
    for _ in range(SCRAPES):
        samples = scrape(stack)
        answered = samples.get("hosting_inference_requests_total{200}", 0.0)
        assert answered == REQUESTS, f"a scrape read {answered} of {REQUESTS} answered requests"
        assert answered >= previous
        previous = answered
        assert samples.get("hosting_inference_request_duration_seconds_count", 0) >= REQUESTS
        # The fleet's gauges (read from heartbeats at scrape time) are still there in multiprocess mode.
        assert samples.get("hosting_workers_alive") == 1


def test_the_dashboard_counts_every_process(stack: Stack) -> None:
    from django.test import override_settings

    from models_registry.staff import dashboard

    with override_settings(HOSTING_PROMETHEUS_MULTIPROC_DIR=stack.tokens["_shared_dir"]):
        assert dashboard.web_processes() == 3
