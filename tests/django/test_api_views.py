"""The HTTP API views through Django's AsyncClient, with no worker and no broker running.

Nothing here can reach a model: what is tested is everything the web process decides on
its own (auth, routing, validation, health, readiness, listings, and the 503 it answers at
once when no live worker serves a model).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from models_registry.models import RegisteredModel
from tests.asgi_client import AsyncClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens")]

GENERATED_ID = re.compile(r"^[0-9a-f]{32}$")
NO_WORKER = "a live worker serving an enabled model"


@pytest.fixture
def client() -> AsyncClient:
    return AsyncClient()


@pytest.fixture
def bert(make_model: Callable[..., RegisteredModel]) -> RegisteredModel:
    """A fill-mask model with a second, named task."""
    model = make_model("bert", task="fill-mask", timeout_s=30.0)
    model.tasks.create(name="mask-top1", task="fill-mask", parameters={"top_k": 1})
    return model


@pytest.fixture
def token(make_token: Callable[..., str], bert: RegisteredModel) -> str:
    """A token valid for every model."""
    return make_token("all")


async def db(factory: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a sync ORM fixture factory from an async test (a thread, as Django requires)."""
    return await sync_to_async(factory)(*args, **kwargs)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def post(client: AsyncClient, path: str, body: Any, token: str | None = None, **extra: Any) -> Any:
    data = body if isinstance(body, (str, bytes)) else json.dumps(body)
    content_type = extra.pop("content_type", "application/json")
    headers = {**(bearer(token) if token else {}), **extra.pop("headers", {})}
    return await client.post(path, data=data, content_type=content_type, headers=headers, **extra)


def error_of(response: Any, status: int, error_type: str) -> str:
    """Assert the SPEC error shape and return its message."""
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error", "error_type"}
    assert body["error_type"] == error_type
    assert response.has_header("X-Request-Id")  # on every response, errors included
    assert "Traceback" not in body["error"]
    return body["error"]


# --- /health ---------------------------------------------------------------------------


async def test_health_is_ok_with_a_request_id(client: AsyncClient) -> None:
    response = await client.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert GENERATED_ID.match(response["X-Request-Id"])


async def test_each_response_gets_its_own_request_id(client: AsyncClient) -> None:
    first, second = await client.get("/health"), await client.get("/health")
    assert first["X-Request-Id"] != second["X-Request-Id"]


async def test_a_client_request_id_is_echoed(client: AsyncClient) -> None:
    response = await client.get("/health", headers={"X-Request-Id": "trace-42.a:b"})
    assert response["X-Request-Id"] == "trace-42.a:b"


@pytest.mark.parametrize("sent", ["has spaces", "x" * 129, "quote\"d", "semi;colon"])
async def test_an_unsafe_client_request_id_is_replaced(client: AsyncClient, sent: str) -> None:
    response = await client.get("/health", headers={"X-Request-Id": sent})
    assert GENERATED_ID.match(response["X-Request-Id"])


async def test_health_refuses_post(client: AsyncClient) -> None:
    response = await client.post("/health")
    assert "POST is not allowed here; use GET" in error_of(response, 405, "method_not_allowed")


async def test_unknown_route_is_a_json_404(client: AsyncClient) -> None:
    response = await client.get("/no/such/route", headers={"X-Request-Id": "r-404"})
    assert error_of(response, 404, "not_found") == "no route /no/such/route"
    assert response["X-Request-Id"] == "r-404"


# --- /ready ----------------------------------------------------------------------------


async def test_ready_is_503_naming_the_missing_worker(client: AsyncClient, bert: RegisteredModel) -> None:
    response = await client.get("/ready")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "not_ready"
    assert NO_WORKER in body["missing"]
    assert "database" not in body["missing"]
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["workers_alive"] == 0
    assert body["checks"]["models_not_served_count"] == 1  # no names without a token
    assert GENERATED_ID.match(response["X-Request-Id"])


async def test_ready_ignores_a_stale_heartbeat(client: AsyncClient, bert: RegisteredModel,
                                               heartbeat: Callable[..., Any]) -> None:
    await db(heartbeat, {"bert": {"state": "ready"}}, age_s=60)
    body = (await client.get("/ready")).json()
    assert NO_WORKER in body["missing"]
    assert body["checks"]["workers_alive"] == 0


async def test_ready_needs_the_worker_to_serve_an_enabled_model(
    client: AsyncClient, make_model: Callable[..., RegisteredModel], heartbeat: Callable[..., Any]
) -> None:
    await db(make_model, "off", enabled=False)
    await db(make_model, "on")
    await db(heartbeat, {"off": {"state": "ready"}, "on": {"state": "loading"}})
    response = await client.get("/ready")
    assert response.status_code == 503
    body = response.json()
    assert NO_WORKER in body["missing"]
    assert body["checks"]["workers_alive"] == 1
    assert body["checks"]["models_ready_count"] == 0
    assert body["checks"]["models_not_ready_count"] == 1  # the worker is meant to serve it: /ready waits for it
    assert body["checks"]["models_not_served_count"] == 0


async def test_ready_counts_a_live_worker_serving_an_enabled_model(
    client: AsyncClient, bert: RegisteredModel, heartbeat: Callable[..., Any]
) -> None:
    await db(heartbeat, {"bert": {"state": "ready"}})
    body = (await client.get("/ready")).json()
    # The broker may or may not answer in this tier; the worker part is deterministic.
    assert NO_WORKER not in body["missing"]
    assert body["checks"]["models_ready_count"] == 1
    assert body["checks"]["models_not_served_count"] == 0


# --- auth ------------------------------------------------------------------------------


async def test_inference_without_a_token_is_401(client: AsyncClient, token: str) -> None:
    response = await post(client, "/models/bert", {"inputs": "a [MASK]"})
    assert "missing API token" in error_of(response, 401, "unauthorized")


@pytest.mark.parametrize("authorization", ["Basic dXNlcjpwYXNz", "Bearer", "Bearer   ", "hst_no_scheme"])
async def test_a_malformed_authorization_header_is_401(client: AsyncClient, token: str, authorization: str) -> None:
    response = await post(client, "/models/bert", {"inputs": "a [MASK]"}, headers={"Authorization": authorization})
    error_of(response, 401, "unauthorized")


async def test_an_unknown_token_is_401(client: AsyncClient, token: str) -> None:
    response = await post(client, "/models/bert", {"inputs": "a [MASK]"}, token="hst_not-a-real-token")
    assert error_of(response, 401, "unauthorized") == "invalid, revoked or expired API token"


@pytest.mark.parametrize("fields", [{"revoked": True}, {"expires_at": "2000-01-01T00:00:00Z"}])
async def test_revoked_or_expired_tokens_are_401(client: AsyncClient, bert: RegisteredModel,
                                                 make_token: Callable[..., str], fields: dict[str, Any]) -> None:
    raw = await db(make_token, "old", **fields)
    response = await post(client, "/models/bert", {"inputs": "a [MASK]"}, token=raw)
    error_of(response, 401, "unauthorized")


async def test_the_bearer_scheme_is_case_insensitive(client: AsyncClient, token: str) -> None:
    response = await post(client, "/models/bert", {"inputs": "a [MASK]"}, headers={"Authorization": f"bearer {token}"})
    error_of(response, 503, "unavailable")  # past auth: refused only because no worker runs


async def test_a_token_limited_to_another_model_is_403(
    client: AsyncClient, bert: RegisteredModel, make_model: Callable[..., RegisteredModel],
    make_token: Callable[..., str],
) -> None:
    other = await db(make_model, "other")
    raw = await db(make_token, "other-only", models=[other])
    response = await post(client, "/models/bert", {"inputs": "a [MASK]"}, token=raw)
    assert "not allowed to use model 'bert'" in error_of(response, 403, "forbidden")
    detail = await client.get("/models/bert", headers=bearer(raw))
    error_of(detail, 403, "forbidden")
    allowed = await post(client, "/models/other", {"inputs": "fine"}, token=raw)
    error_of(allowed, 503, "unavailable")


async def test_no_token_needed_when_tokens_are_off(client: AsyncClient, bert: RegisteredModel, settings: Any) -> None:
    settings.HOSTING_REQUIRE_API_TOKEN = False
    response = await post(client, "/models/bert", {"inputs": "a [MASK]"})
    error_of(response, 503, "unavailable")


# --- routing ---------------------------------------------------------------------------


async def test_unknown_model_is_404(client: AsyncClient, token: str) -> None:
    response = await post(client, "/models/nope", {"inputs": "x"}, token=token)
    assert error_of(response, 404, "not_found") == "no model named 'nope'; GET /models lists them"


async def test_unknown_task_is_404_listing_the_tasks(client: AsyncClient, token: str) -> None:
    response = await post(client, "/models/bert/summarize", {"inputs": "x"}, token=token)
    message = error_of(response, 404, "not_found")
    assert message == "model 'bert' has no task 'summarize'; its tasks: fill-mask, mask-top1"


async def test_get_on_a_task_route_is_405(client: AsyncClient, token: str) -> None:
    response = await client.get("/models/bert/fill-mask", headers=bearer(token))
    assert error_of(response, 405, "method_not_allowed") == "GET is not allowed here; use POST"


async def test_put_is_405(client: AsyncClient, token: str) -> None:
    response = await client.put("/models/bert", data="{}", content_type="application/json", headers=bearer(token))
    error_of(response, 405, "method_not_allowed")


# --- validation happens in the web process, before any worker is asked -----------------


async def test_malformed_json_is_400(client: AsyncClient, token: str) -> None:
    response = await post(client, "/models/bert", '{"inputs": "a [MASK]"', token=token)
    assert error_of(response, 400, "invalid_input").startswith("malformed JSON:")


async def test_unknown_parameter_is_400_listing_the_allowed_ones(client: AsyncClient, token: str) -> None:
    response = await post(client, "/models/bert", {"inputs": "a [MASK]", "parameters": {"temperature": 1}},
                          token=token)
    assert error_of(response, 400, "invalid_input").endswith("it takes: targets, top_k")


async def test_wrong_input_type_is_400(client: AsyncClient, token: str) -> None:
    response = await post(client, "/models/bert", {"inputs": ["ok [MASK]", 3]}, token=token)
    assert error_of(response, 400, "invalid_input") == "inputs[1] must be a string, not int"


async def test_unsupported_content_type_is_400(client: AsyncClient, token: str) -> None:
    response = await post(client, "/models/bert", "<inputs/>", token=token, content_type="application/xml")
    assert "unsupported content type" in error_of(response, 400, "invalid_input")


async def test_too_many_inputs_is_413(client: AsyncClient, token: str, settings: Any) -> None:
    settings.HOSTING_MAX_INPUTS = 2
    response = await post(client, "/models/bert", {"inputs": ["a [MASK]"] * 3}, token=token)
    assert "at most 2" in error_of(response, 413, "too_large")


async def test_body_over_the_limit_is_413(client: AsyncClient, token: str, settings: Any) -> None:
    settings.HOSTING_MAX_BODY_BYTES = 64
    response = await post(client, "/models/bert", {"inputs": "a [MASK] " + "x" * 100}, token=token)
    assert "the limit is 64" in error_of(response, 413, "too_large")


async def test_body_over_djangos_upload_limit_is_still_413(client: AsyncClient, token: str, settings: Any) -> None:
    # With the shipped settings a 1 MiB limit answers 413 up to 2.5 MiB; past that Django refuses first.
    size = settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1
    response = await post(client, "/models/bert", {"inputs": "a [MASK] " + "x" * size}, token=token)
    error_of(response, 413, "too_large")


# --- no live worker: 503 at once -------------------------------------------------------


async def test_no_live_worker_is_503_at_once(client: AsyncClient, token: str) -> None:
    started = time.monotonic()
    response = await post(client, "/models/bert", {"inputs": "Paris is the [MASK]."}, token=token,
                          headers={"X-Request-Id": "req-7"})
    elapsed = time.monotonic() - started
    assert error_of(response, 503, "unavailable") == "no live worker serves model 'bert'"
    assert response["X-Request-Id"] == "req-7"
    assert elapsed < 10, "answered at once, not after the task's 30 s timeout"


async def test_named_task_with_no_live_worker_is_503(client: AsyncClient, token: str) -> None:
    response = await post(client, "/models/bert/mask-top1", {"inputs": "a [MASK]"}, token=token)
    error_of(response, 503, "unavailable")


async def test_text_plain_body_reaches_the_serving_check(client: AsyncClient, token: str) -> None:
    response = await post(client, "/models/bert", "Paris is the [MASK] of France.", token=token,
                          content_type="text/plain")
    error_of(response, 503, "unavailable")


async def test_disabled_model_is_503(client: AsyncClient, make_model: Callable[..., RegisteredModel],
                                     make_token: Callable[..., str], heartbeat: Callable[..., Any]) -> None:
    await db(make_model, "off", enabled=False)
    await db(heartbeat, {"off": {"state": "ready"}})
    response = await post(client, "/models/off", {"inputs": "x"}, token=await db(make_token, "t"))
    assert error_of(response, 503, "unavailable") == "model 'off' is disabled"


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"state": "loading"}, "model 'bert' is loading"),
        ({"state": "error", "error": "CUDA out of memory"},  # the raw error is for the admin only
         "model 'bert' is error: failed to load; an operator can see why in the admin"),
    ],
)
async def test_a_model_not_ready_on_its_worker_is_503(client: AsyncClient, token: str, heartbeat: Callable[..., Any],
                                                      state: dict[str, str], message: str) -> None:
    await db(heartbeat, {"bert": state})
    response = await post(client, "/models/bert", {"inputs": "a [MASK]"}, token=token)
    assert error_of(response, 503, "unavailable") == message


async def test_a_stale_ready_heartbeat_does_not_count(client: AsyncClient, token: str,
                                                      heartbeat: Callable[..., Any]) -> None:
    await db(heartbeat, {"bert": {"state": "ready"}}, age_s=60)
    response = await post(client, "/models/bert", {"inputs": "a [MASK]"}, token=token)
    assert error_of(response, 503, "unavailable") == "no live worker serves model 'bert'"


async def test_a_draining_worker_does_not_count(client: AsyncClient, token: str, heartbeat: Callable[..., Any]) -> None:
    await db(heartbeat, {"bert": {"state": "ready"}}, draining=True)
    response = await post(client, "/models/bert", {"inputs": "a [MASK]"}, token=token)
    assert error_of(response, 503, "unavailable") == "no live worker serves model 'bert'"


# --- GET /models and /models/<name> ----------------------------------------------------


async def test_model_list_needs_a_token(client: AsyncClient, token: str) -> None:
    error_of(await client.get("/models"), 401, "unauthorized")


async def test_model_list_shows_loading_when_no_worker_has_a_heartbeat(
    client: AsyncClient, token: str, make_model: Callable[..., RegisteredModel]
) -> None:
    await db(make_model, "zz-off", enabled=False)
    response = await client.get("/models", headers=bearer(token))
    assert response.status_code == 200
    assert GENERATED_ID.match(response["X-Request-Id"])
    models = response.json()["models"]
    assert [m["name"] for m in models] == ["bert", "zz-off"]
    bert, off = models
    assert bert["state"] == "loading"
    assert bert["error"] == "no live worker has loaded this model yet"
    assert bert["tasks"] == ["fill-mask", "mask-top1"]
    assert bert["default_task"] == "fill-mask"
    assert (bert["source"], bert["enabled"]) == ("example/bert", True)
    assert (off["state"], off["enabled"]) == ("disabled", False)


async def test_model_list_shows_what_live_workers_report(client: AsyncClient, token: str,
                                                         heartbeat: Callable[..., Any],
                                                         make_model: Callable[..., RegisteredModel]) -> None:
    await db(make_model, "cls")
    await db(heartbeat, {"bert": {"state": "ready"}, "cls": {"state": "error", "error": "no such file"}})
    models = {m["name"]: m for m in (await client.get("/models", headers=bearer(token))).json()["models"]}
    assert (models["bert"]["state"], models["bert"]["error"]) == ("ready", "")
    assert (models["cls"]["state"], models["cls"]["error"]) == (
        "error", "failed to load; an operator can see why in the admin")  # the raw error is for the admin


async def test_the_best_state_over_several_workers_wins(client: AsyncClient, token: str,
                                                        heartbeat: Callable[..., Any]) -> None:
    await db(heartbeat, {"bert": {"state": "error", "error": "boom"}}, worker_id="w1")
    await db(heartbeat, {"bert": {"state": "ready"}}, worker_id="w2")
    models = (await client.get("/models", headers=bearer(token))).json()["models"]
    assert models[0]["state"] == "ready"


async def test_model_detail_has_task_settings_and_live_queue_depth(client: AsyncClient, token: str,
                                                                   heartbeat: Callable[..., Any], settings: Any) -> None:
    settings.HOSTING_METRICS_TOKEN = "operator-secret"
    await db(heartbeat, {"bert": {"state": "ready"}}, queue_depths={"bert/fill-mask": 7, "bert/mask-top1": 0})
    await db(heartbeat, {"bert": {"state": "ready"}}, queue_depths={"bert/fill-mask": 2}, worker_id="w2")
    response = await client.get("/models/bert", headers=bearer(token))
    assert response.status_code == 200
    body = response.json()
    assert body["name"] == "bert" and body["state"] == "ready"
    tasks = {t["name"]: t for t in body["tasks"]}
    assert tasks["fill-mask"]["waiting_on_workers"] == 9
    assert tasks["mask-top1"]["waiting_on_workers"] == 0
    # Admitted items live in Redis: -1 when this tier has no broker, 0 with REDIS_URL's.
    assert tasks["fill-mask"]["queue_depth"] in (-1, 0)
    assert tasks["mask-top1"]["parameters"] == {"top_k": 1}
    assert tasks["fill-mask"]["timeout_s"] == 30.0
    assert tasks["fill-mask"]["max_batch_size"] == 32
    assert tasks["fill-mask"]["max_queue_size"] == 1024
    assert tasks["fill-mask"]["max_batch_delay_ms"] == 5
    assert tasks["fill-mask"]["pooling"] is None  # feature-extraction only
    assert {w["state"] for w in body["workers"]} == {"ready"}
    assert not any("worker" in w or "served_items" in w for w in body["workers"])  # an API token: no host:pid
    operator = (await client.get("/models/bert", headers=bearer("operator-secret"))).json()
    assert [w["worker"] for w in operator["workers"]] == ["test-host:4242", "test-host:4242"]


async def test_model_detail_of_an_unknown_model_is_404(client: AsyncClient, token: str) -> None:
    error_of(await client.get("/models/nope", headers=bearer(token)), 404, "not_found")


async def test_model_detail_needs_a_token(client: AsyncClient, token: str) -> None:
    error_of(await client.get("/models/bert"), 401, "unauthorized")
