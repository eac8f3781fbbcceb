"""Model versions in the registry: register_model's --canary/--shadow/--promote/--rollback, the switch, the specs
workers hold, X-Model-Version on the HF and OpenAI routes, and the admin's history and actions."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import AsyncClient, Client

from models_registry.broker.handoff import InferenceResult
from models_registry.models import ModelVersion, RegisteredModel
from models_registry.catalog import version_changes
from models_registry.catalog.rollout import CANARY, Rollout
from models_registry.catalog.specs import read_specs, worker_specs

OLD, NEW, OTHER = "example/old-encoder", "example/new-encoder", "example/third-encoder"


def register(*args: str) -> str:
    out = io.StringIO()
    call_command("register_model", "enc", *args, stdout=out)
    return out.getvalue()


def register_source(source: str, *args: str) -> str:
    return register("--source", source, "--task", "feature-extraction", *args)


def model() -> RegisteredModel:
    return RegisteredModel.objects.get(name="enc")


@pytest.mark.django_db
def test_a_change_of_what_the_model_computes_makes_a_version_and_settings_do_not() -> None:
    register_source(OLD)
    assert (model().live_version, model().target_version) == (1, 0)
    register_source(OLD, "--max-batch-size", "4")  # queue settings: no new version
    assert ModelVersion.objects.filter(model__name="enc").count() == 1
    out = register_source(NEW)
    assert "version 2" in out
    assert (model().live_version, model().target_version, model().source) == (1, 2, NEW)
    register_source(NEW, "--dtype", "float16")  # dtype changes what it computes: v3 replaces the pending v2
    assert (model().live_version, model().target_version) == (1, 3)


@pytest.mark.django_db
def test_canary_promote_and_rollback_need_no_other_argument() -> None:
    register_source(OLD)
    assert "canary 25%" in register_source(NEW, "--canary", "25", "--sticky")
    enc = model()
    assert (enc.live_version, enc.candidate_version, enc.candidate_mode, enc.candidate_percent) == (1, 2, CANARY, 25)
    assert enc.candidate_sticky and enc.source == OLD  # the model's own fields say what stays live
    register_source(NEW, "--canary", "50")  # the same candidate again: only its share changes
    assert (model().candidate_version, model().candidate_percent) == (2, 50)
    assert "dropped candidate v2" in register("--rollback")
    assert (model().live_version, model().candidate_version) == (1, 0)

    register_source(OTHER, "--canary", "10")
    assert "promoted v3" in register("--promote")
    assert (model().target_version, model().candidate_version, model().source) == (3, 0, OTHER)
    assert version_changes.switch_ready({"enc": {3}}) == ["enc"]
    assert (model().live_version, model().previous_version, model().target_version) == (3, 1, 0)
    assert version_changes.switch_ready({"enc": {3}}) == []  # idempotent
    assert "going back to v1" in register("--rollback")
    assert (model().target_version, model().source) == (1, OLD)


@pytest.mark.django_db
@pytest.mark.parametrize("args, message", [
    (["--promote"], "no canary or shadow version"),
    (["--rollback"], "no candidate and no previous version"),
    (["--source", NEW, "--task", "feature-extraction", "--canary", "150"], "from 0 to 100"),
    ([], "--source and --task are required"),
])
def test_impossible_version_commands_are_refused_clearly(args: list[str], message: str) -> None:
    register_source(OLD)
    with pytest.raises(CommandError, match=message):
        register(*args)


@pytest.mark.django_db
def test_workers_hold_each_version_by_its_wire_name() -> None:
    register_source(OLD)
    register_source(NEW, "--shadow", "100")
    spec = read_specs()["enc"]
    assert (spec.source, spec.version, spec.rollout.candidate) == (OLD, 1, 2)
    held = worker_specs({"enc": spec})
    assert {name: (s.source, s.version) for name, s in held.items()} == {"enc.v1": (OLD, 1), "enc.v2": (NEW, 2)}


@pytest.fixture
def open_api(settings: Any) -> None:
    """No token needed: these tests are about versions."""
    settings.HOSTING_REQUIRE_API_TOKEN = False


@pytest.fixture
def versioned(make_model: Callable[..., RegisteredModel]) -> RegisteredModel:
    enc = make_model("enc", task="feature-extraction")
    version_changes.record(enc)  # v1, live
    enc.source = NEW
    enc.save()
    version_changes.record(enc)  # v2, the target
    return enc


def vectors(kwargs: dict[str, Any]) -> InferenceResult:
    row = np.array([0.5, 0.5], dtype="<f4")  # as a worker sends a vector: its bytes and shape
    return InferenceResult(outputs=[[row.tobytes(), [2]] for _ in kwargs["inputs"]], queue_ms=1.0, compute_ms=1.0,
                           batch_size=1, tokens=3)


@pytest.mark.django_db(transaction=True)
async def test_answers_carry_the_version_that_computed_them(
        versioned: RegisteredModel, stub_worker: Callable[..., list[dict[str, Any]]],
        heartbeat: Callable[..., Any], open_api: None) -> None:
    from asgiref.sync import sync_to_async

    calls = stub_worker(vectors)
    client = AsyncClient()
    await sync_to_async(heartbeat)({"enc.v1": {"state": "ready", "tasks": ["feature-extraction"]},
                                    "enc.v2": {"state": "loading", "tasks": ["feature-extraction"]}})
    response = await client.post("/models/enc", data=json.dumps({"inputs": "a"}), content_type="application/json")
    assert response.status_code == 200 and response.headers["X-Model-Version"] == "1"
    assert calls[-1]["model"] == "enc.v1"  # v2 is not warm yet: live answers

    from models_registry.models import WorkerHeartbeat
    from models_registry.catalog import lookups

    await sync_to_async(WorkerHeartbeat.objects.all().delete)()
    await sync_to_async(heartbeat)({"enc.v1": {"state": "ready", "tasks": ["feature-extraction"]},
                                    "enc.v2": {"state": "ready", "tasks": ["feature-extraction"]}})
    lookups.reset()
    for path, body in (("/models/enc", {"inputs": "a"}), ("/v1/embeddings", {"model": "enc", "input": "a"})):
        response = await client.post(path, data=json.dumps(body), content_type="application/json")
        assert response.status_code == 200, response.content
        assert response.headers["X-Model-Version"] == "2"
        assert calls[-1]["model"] == "enc.v2"


@pytest.mark.django_db(transaction=True)
async def test_a_first_load_answers_503_with_retry_after(make_model: Callable[..., RegisteredModel],
                                                         heartbeat: Callable[..., Any], open_api: None) -> None:
    from asgiref.sync import sync_to_async

    enc = await sync_to_async(make_model)("enc", task="feature-extraction")
    await sync_to_async(version_changes.record)(enc)
    await sync_to_async(heartbeat)({"enc.v1": {"state": "loading", "tasks": ["feature-extraction"]}})
    response = await AsyncClient().post("/models/enc", data=json.dumps({"inputs": "a"}),
                                        content_type="application/json")
    assert response.status_code == 503 and response.json()["error_type"] == "unavailable"
    assert int(response.headers["Retry-After"]) >= 1
    assert response.headers["X-Model-Version"] == "1"


def test_the_rollout_of_a_model_without_versions_is_its_own_name() -> None:
    assert Rollout().held() == []
    assert worker_specs({}) == {}


@pytest.mark.django_db
def test_admin_shows_the_history_and_promotes(admin_client: Client) -> None:
    register_source(OLD)
    register_source(NEW, "--canary", "20")
    enc = model()
    page = admin_client.get(f"/admin/models_registry/registeredmodel/{enc.pk}/change/").content.decode()
    assert NEW in page and "canary v2 20%" in page
    changelist = "/admin/models_registry/registeredmodel/"
    assert "v1; canary v2 20%" in admin_client.get(changelist).content.decode()
    response = admin_client.post(changelist, {"action": "promote", "_selected_action": [enc.pk]}, follow=True)
    assert "promoted v2" in response.content.decode()
    assert model().target_version == 2
    response = admin_client.post(changelist, {"action": "promote", "_selected_action": [enc.pk]}, follow=True)
    assert "no canary or shadow version" in response.content.decode()


@pytest.mark.django_db(transaction=True)
def test_admin_shows_what_the_shadow_measured(admin_client: Client, broker: str) -> None:
    from asgiref.sync import async_to_sync

    from models_registry.policy import shadow

    register_source(OLD)
    register_source(NEW, "--shadow", "100")
    for seconds, far in ((0.010, 0.25), (0.030, 0.75), (None, None)):
        async_to_sync(shadow._add)("enc", 2, seconds, far)
    sums = async_to_sync(shadow.read_sums)("enc", 2)
    assert (sums["n"], sums["errors"]) == (2, 1)
    assert sums["mean_distance"] == pytest.approx(0.5) and sums["mean_ms"] == pytest.approx(20.0)
    page = admin_client.get("/admin/models_registry/registeredmodel/").content.decode()
    assert "shadow v2 100%" in page and "2 compared, mean distance 0.5000, mean 20.0 ms, 1 failed" in page
