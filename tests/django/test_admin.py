"""The staff side: the admin (change lists, test-input action, read-only heartbeats) and the dashboard."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.messages import get_messages
from django.test import Client

from models_registry.staff import dashboard, sample_request
from models_registry.api.hf import hf_route
from models_registry.api.pipeline import inference_route
from models_registry.api.pipeline.call import ApiCall
from models_registry.broker import handoff as inference_client
from models_registry.broker.handoff import InferenceResult
from models_registry.core.errors import Timeout
from models_registry.models import RegisteredModel, WorkerHeartbeat
from models_registry.observe import metrics, traffic_window

CHANGELIST = "/admin/models_registry/registeredmodel/"
HEARTBEATS = "/admin/models_registry/workerheartbeat/"


def ready_state(*tasks: str) -> dict[str, Any]:
    """What a worker reports for a model it has loaded."""
    return {"state": "ready", "error": "", "device": "cpu", "tasks": list(tasks)}


@pytest.fixture(autouse=True)
def empty_window() -> None:
    """Traffic recorded by other tests must not show up here."""
    traffic_window.WINDOW.clear()


def test_model_change_list_shows_state_queue_and_throughput(admin_client: Client, make_model: Callable[..., Any],
                                                            heartbeat: Callable[..., Any]) -> None:
    make_model("sentiment")
    heartbeat({"sentiment": ready_state("text-classification")}, {"sentiment/text-classification": 7})
    for _ in range(30):
        traffic_window.WINDOW.record_success("sentiment", "text-classification", 0.01, 0.002, 0.005, 4)
    response = admin_client.get(CHANGELIST)
    assert response.status_code == 200
    html = response.content.decode()
    assert "sentiment" in html and "Req/s (1 min)" in html
    assert '<td class="field-live_state">ready</td>' in html
    assert '<td class="field-queue_depth">7</td>' in html
    assert '<td class="field-throughput">0.50</td>' in html  # 30 requests / 60 s
    assert '<td class="field-loaded_on">test-host:' in html and '<td class="field-memory">not measured</td>' in html


def test_model_change_list_shows_where_models_are_loaded_and_their_memory(
        admin_client: Client, make_model: Callable[..., Any], heartbeat: Callable[..., Any]) -> None:
    make_model("held")
    make_model("cold")
    fit = {"samples": 9, "max_relative_error": 0.04, "cap_tokens": 4096}
    heartbeat({"held": {**ready_state("text-classification"), "memory_bytes": 90 * 2**20,
                        "memory": {"text-classification": fit}},
               "cold": {"state": "available", "error": "", "tasks": ["text-classification"],
                        "memory_bytes": 30 * 2**20}})
    html = admin_client.get(CHANGELIST).content.decode()
    assert '<td class="field-memory">90 MiB, fit ±4%</td>' in html
    assert '<td class="field-loaded_on">on demand</td>' in html and '<td class="field-memory">30 MiB</td>' in html
    assert '<td class="field-live_state">available</td>' in html
    assert 'name="keep_loaded"' in admin_client.get(CHANGELIST + "add/").content.decode()


def test_model_add_page_renders_with_task_inline(admin_client: Client) -> None:
    response = admin_client.get(CHANGELIST + "add/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'name="tasks-0-max_queue_size"' in html and 'name="source"' in html


def test_heartbeat_admin_is_read_only(admin_client: Client, heartbeat: Callable[..., Any]) -> None:
    beat = heartbeat({"m": ready_state("fill-mask")})
    listing = admin_client.get(HEARTBEATS)
    assert listing.status_code == 200 and "test-host" in listing.content.decode()
    assert b"delete_selected" not in listing.content
    assert admin_client.get(HEARTBEATS + "add/").status_code == 403
    change_url = f"{HEARTBEATS}{beat.pk}/change/"
    detail = admin_client.get(change_url)
    assert detail.status_code == 200 and b'name="_save"' not in detail.content
    assert admin_client.post(change_url, {"host": "edited", "pid": 1}).status_code == 403
    assert admin_client.post(f"{HEARTBEATS}{beat.pk}/delete/", {"post": "yes"}).status_code == 403
    assert WorkerHeartbeat.objects.get(pk=beat.pk).host == "test-host"


def _run_action(admin_client: Client, model: RegisteredModel) -> list[tuple[str, str]]:
    response = admin_client.post(CHANGELIST, {"action": "run_test_input", "_selected_action": [model.pk]},
                                 follow=True)
    assert response.status_code == 200
    return [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]


def test_test_input_action_shows_output_and_timings(admin_client: Client, make_model: Callable[..., Any],
                                                    heartbeat: Callable[..., Any],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    model = make_model("masker", task="fill-mask", parameters={"top_k": 2})
    heartbeat({"masker": ready_state("fill-mask")})
    sent: dict[str, Any] = {}

    async def fake_infer(**kwargs: Any) -> InferenceResult:
        sent.update(kwargs)
        outputs = [[{"score": 0.5, "token": 1, "token_str": "capital", "sequence": "x" * 500}]]
        return InferenceResult(outputs=outputs, queue_ms=1.25, compute_ms=8.5, batch_size=1)

    monkeypatch.setattr(inference_client, "infer", fake_infer)
    [(level, message)] = _run_action(admin_client, model)
    assert level == "success"
    assert sent["inputs"] == ["Paris is the [MASK] of France."] and sent["parameters"] == {"top_k": 2}
    assert sent["model"] == "masker" and sent["task"] == "fill-mask" and sent["max_queue_size"] == 1024
    assert "capital" in message and "queue 1.2 ms" in message and "compute 8.5 ms" in message
    assert "characters)" in message and len(message) < 600  # the long output is truncated


@pytest.mark.usefixtures("require_tokens")
def test_test_input_is_an_api_request_of_a_staff_user(admin_client: Client, make_model: Callable[..., Any],
                                                      heartbeat: Callable[..., Any], monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """The sample request goes through the routes' skeleton: counted and logged like any, with no API token."""
    model = make_model("sentiment", timeout_s=120.0)
    heartbeat({"sentiment": ready_state("text-classification")})
    sent: list[dict[str, Any]] = []

    async def fake_infer(**kwargs: Any) -> InferenceResult:
        sent.append(kwargs)
        return InferenceResult(outputs=[[{"label": "POSITIVE", "score": 0.987654}]], queue_ms=1.0, compute_ms=2.0,
                               batch_size=1)

    monkeypatch.setattr(inference_client, "infer", fake_infer)
    answered = metrics.REQUESTS.labels("sentiment", "text-classification", "200")
    before = answered._value.get()
    with caplog.at_level(logging.INFO, logger="models_registry.requests"):
        [(level, message)] = _run_action(admin_client, model)
    assert level == "success" and '[[{"label": "POSITIVE", "score": 0.9877}]]' in message, message
    assert answered._value.get() == before + 1
    [line] = [r.getMessage() for r in caplog.records if r.name == "models_registry.requests"]
    assert "model=sentiment" in line and "route=hf" in line and "status=200" in line and "id=admin-test-" in line
    assert sent[0]["timeout_s"] == sample_request.TEST_TIMEOUT_S  # the task's 120 s, capped
    # The same call from HTTP (no staff flag: from_scope and from_django never set it) needs a token.
    call = ApiCall("r1", "POST", "/models/sentiment", b'{"inputs": "hi"}', "application/json")
    refused = async_to_sync(inference_route.serve)(hf_route.ROUTE, call, {"name": "sentiment"})
    assert refused.status == 401 and len(sent) == 1


def test_test_input_action_reports_errors(admin_client: Client, make_model: Callable[..., Any],
                                          heartbeat: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    served = make_model("slow")
    unserved = make_model("orphan")
    heartbeat({"slow": ready_state("text-classification")})

    async def timing_out(**kwargs: Any) -> InferenceResult:
        raise Timeout("no result within 30 s")

    monkeypatch.setattr(inference_client, "infer", timing_out)
    [(level, message)] = _run_action(admin_client, served)
    assert level == "error" and "timeout: no result within 30 s" in message
    [(level, message)] = _run_action(admin_client, unserved)
    assert level == "error" and "no live worker" in message


def test_dashboard_needs_a_staff_login(client: Client, django_user_model: Any, db: None) -> None:
    response = client.get("/dashboard/")
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/?next=/dashboard/")
    data = client.get("/dashboard/data.json")
    assert data.status_code == 403 and data.json()["error_type"] == "forbidden"
    client.force_login(django_user_model.objects.create_user("viewer", password="pw-123456", is_staff=False))
    assert client.get("/dashboard/").status_code == 302
    assert client.get("/dashboard/data.json").status_code == 403


def test_dashboard_page_loads_its_script_and_chart_library(admin_client: Client) -> None:
    response = admin_client.get("/dashboard/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-url="/dashboard/data.json"' in html
    assert "models_registry/vendor/uPlot.iife.min.js" in html and "models_registry/dashboard.js" in html


def test_dashboard_data_combines_traffic_heartbeats_and_limits(admin_client: Client,
                                                               make_model: Callable[..., Any],
                                                               heartbeat: Callable[..., Any]) -> None:
    make_model("sentiment", max_queue_size=64, max_batch_size=8)
    heartbeat({"sentiment": ready_state("text-classification")}, {"sentiment/text-classification": 5})
    heartbeat({"other": ready_state("fill-mask")}, worker_id="stale", age_s=60)
    now = [1_000_000.0]
    window = traffic_window.RollingWindow(clock=lambda: now[0])
    for ms in range(1, 101):  # 100 requests in one second, latencies 1..100 ms
        window.record_success("sentiment", "text-classification", ms / 1000, ms / 4000, ms / 2000, 8)
    window.record_failure("sentiment", "text-classification", "overloaded")
    window.record_failure("sentiment", "text-classification", "timeout")
    now[0] += 1
    snap = dashboard.snapshot(window)
    assert snap["workers_alive"] == 1 and [w["pid"] for w in snap["workers"]] == [4242]
    [task] = snap["tasks"]
    assert (task["model"], task["task"], task["state"]) == ("sentiment", "text-classification", "ready")
    assert task["queue_depth"] == 5 and task["max_queue_size"] == 64
    summary = task["summary"]
    assert summary["requests"] == 102 and summary["errors"] == 2
    assert summary["rejected"] == {"overloaded": 1, "unavailable": 0, "timeout": 1}
    assert summary["latency_ms"]["total"] == {"p50": 50.0, "p95": 95.0, "p99": 99.0}
    assert summary["latency_ms"]["queue"]["p50"] == 12.5 and summary["latency_ms"]["compute"]["p99"] == 49.5
    assert summary["batch_sizes"] == {"labels": ["1", "2", "3-4", "5-8"], "counts": [0, 0, 0, 100]}
    series = task["series"]
    assert series["t"][-1] == 1_000_000 and series["rps"][-1] == 102 and series["total_p99"][-1] == 99.0
    assert series["overloaded"][-1] == 1 and series["rps"][-2] == 0 and series["total_p50"][-2] is None
    # The depth sampled during the call lands in the current second, shown once it completes.
    now[0] += 1
    assert dashboard.snapshot(window)["tasks"][0]["series"]["depth"][-1] == 5

    response = admin_client.get("/dashboard/data.json")
    assert response.status_code == 200 and response["Cache-Control"].startswith("max-age=0")
    body = json.loads(response.content)
    assert body["tasks"][0]["model"] == "sentiment" and body["workers_alive"] == 1


def test_rolling_window_drops_old_seconds_and_caps_samples() -> None:
    now = [500.0]
    window = traffic_window.RollingWindow(window_s=10, clock=lambda: now[0])
    for _ in range(traffic_window.SAMPLES_PER_SECOND * 3):
        window.record_success("m", "t", 0.001, 0.0, 0.001, 1)
    now[0] += 1
    assert window.summary("m", "t", 10)["requests"] == traffic_window.SAMPLES_PER_SECOND * 3
    assert window.rate("m", 10) == pytest.approx(traffic_window.SAMPLES_PER_SECOND * 3 / 10)
    assert len(window._keys[("m", "t")][0].latency["total"]) == traffic_window.SAMPLES_PER_SECOND
    now[0] += 20
    window.record_failure("m", "t", "unavailable")
    assert len(window._keys[("m", "t")]) == 1
    assert window.summary("m", "t", 10)["requests"] == 0  # the current second is still filling
    assert window.rate("m", 60) == pytest.approx(1 / 60)  # the admin's rate counts it already


def test_load_now_makes_a_fresh_copy_the_target_and_reloads_an_unversioned_model_in_place(admin_client: Any) -> None:
    from models_registry.catalog import version_changes
    from models_registry.models import RegisteredModel

    versioned = RegisteredModel.objects.create(name="reloadable", source="some/hub-id")
    version_changes.record(versioned)
    plain = RegisteredModel.objects.create(name="plain", source="some/other-id")
    response = admin_client.post("/admin/models_registry/registeredmodel/",
                                 {"action": "load_now", "_selected_action": [versioned.pk, plain.pk], "index": 0},
                                 follow=True)
    assert response.status_code == 200
    assert "v2 (a fresh copy of v1) loads beside v1" in response.content.decode()
    versioned.refresh_from_db()
    assert (versioned.live_version, versioned.target_version, versioned.load_generation) == (1, 2, 0)
    copy = versioned.versions.get(number=2)
    assert copy.compute_key() == versioned.versions.get(number=1).compute_key() and copy.reload_of == 1
    plain.refresh_from_db()
    assert plain.load_generation == 1 and plain.live_version == 0
    page = admin_client.get(f"/admin/models_registry/registeredmodel/{versioned.pk}/change/").content.decode()
    assert "Load now (a copy of v1)" in page
