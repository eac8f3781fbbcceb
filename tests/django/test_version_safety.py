"""Versions that must not surprise clients: a new version or canary whose answers change shape is refused unless
allowed; a rollback goes back one version in the history and never forward; a failed version shows as failed."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from models_registry.catalog import output_shape, version_changes
from models_registry.catalog.rollout import Rollout
from models_registry.catalog.specs import ModelSpec, TaskSpec
from models_registry.core.batch_types import BatchPolicy
from models_registry.core.errors import InvalidInput
from models_registry.core.sources import LOAD_FAILED
from models_registry.models import ModelVersion, RegisteredModel

CHANGELIST = "/admin/models_registry/registeredmodel/"


def config_dir(root: Path, name: str, **config: Any) -> str:
    """A model directory with only its config.json (what the shape check reads)."""
    folder = root / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", **config}))
    return str(folder)


@pytest.fixture
def sources(tmp_path: Path) -> dict[str, str]:
    return {"narrow": config_dir(tmp_path, "narrow", hidden_size=32),
            "narrow-b": config_dir(tmp_path, "narrow-b", hidden_size=32),
            "wide": config_dir(tmp_path, "wide", hidden_size=48),
            "two": config_dir(tmp_path, "two", hidden_size=32, id2label={"0": "NEG", "1": "POS"}),
            "three": config_dir(tmp_path, "three", hidden_size=32, id2label={"0": "NEG", "1": "NEU", "2": "POS"})}


def register(source: str, *args: str, task: str = "feature-extraction") -> str:
    out = io.StringIO()
    call_command("register_model", "enc", "--source", source, "--task", task, *args, stdout=out)
    return out.getvalue()


def model() -> RegisteredModel:
    return RegisteredModel.objects.get(name="enc")


@pytest.mark.django_db
@pytest.mark.parametrize("args", [["--canary", "25"], ["--shadow", "10"], []])
def test_a_version_of_another_vector_size_is_refused_naming_both(sources: dict[str, str], args: list[str]) -> None:
    register(sources["narrow"])
    with pytest.raises(CommandError) as refused:
        register(sources["wide"], *args)
    message = str(refused.value)
    assert "v2 answers 48-float vectors where live v1 answers 32-float vectors" in message
    assert "--allow-shape-change" in message
    # Nothing of the refused registration is kept.
    assert (model().source, model().candidate_version, model().target_version) == (sources["narrow"], 0, 0)
    assert ModelVersion.objects.filter(model__name="enc").count() == 1
    assert "version 2" in register(sources["wide"], *args, "--allow-shape-change")
    assert ModelVersion.objects.get(model__name="enc", number=2).allow_shape_change
    register(sources["narrow-b"], *args)  # the same shape as live: no confirmation needed
    assert ModelVersion.objects.filter(model__name="enc").count() == 3


@pytest.mark.django_db
def test_a_classifier_with_other_labels_is_refused(sources: dict[str, str]) -> None:
    register(sources["two"], task="text-classification")
    with pytest.raises(CommandError, match="labels NEG, NEU, POS where live v1 answers labels NEG, POS"):
        register(sources["three"], "--canary", "50", task="text-classification")


@pytest.mark.django_db
def test_a_target_the_workers_refused_registered_again_allowed_is_made_anew(
        sources: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A hub model whose config the registry could not read is refused by the workers (they can): registered
    again with --allow-shape-change it is a new version, allowed, which the workers load."""
    register(sources["narrow"])
    with monkeypatch.context() as unread:
        unread.setattr(output_shape, "read_config", lambda source, revision: None)
        register(sources["wide"])  # v2: the registry cannot tell
    assert model().target_version == 2 and not ModelVersion.objects.get(model__name="enc", number=2).allow_shape_change
    register(sources["wide"], "--allow-shape-change")
    assert model().target_version == 3 and ModelVersion.objects.get(model__name="enc", number=3).allow_shape_change
    register(sources["wide"], "--allow-shape-change")  # idempotent once allowed
    assert model().target_version == 3


def switch(number: int) -> None:
    assert version_changes.switch_ready({"enc": {number}}) == ["enc"]


def rollback() -> str:
    out = io.StringIO()
    call_command("register_model", "enc", "--rollback", stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_two_rollbacks_go_back_two_versions_and_never_forward(sources: dict[str, str]) -> None:
    register(sources["narrow"])  # v1
    register(sources["narrow-b"])  # v2
    switch(2)
    register(sources["narrow"], "--revision", "other")  # v3
    switch(3)
    assert "going back to v2" in rollback()
    assert "going back to v1" in rollback()  # before the first is done: further back, not "stop" (v3 again)
    assert model().target_version == 1
    switch(1)
    with pytest.raises(CommandError, match="no previous version"):
        rollback()
    assert (model().live_version, model().target_version) == (1, 0)


@pytest.mark.django_db
def test_a_rollback_after_a_rollback_never_returns_to_the_newer_version(sources: dict[str, str]) -> None:
    register(sources["narrow"])  # v1
    register(sources["narrow-b"])  # v2
    switch(2)
    assert "going back to v1" in rollback()
    switch(1)
    with pytest.raises(CommandError, match="no previous version"):
        rollback()  # was: back to v2, the version just rolled back from
    register(sources["narrow-b"])  # v2's source again: a new version (v3), forward by choice
    switch(3)
    assert "going back to v1" in rollback()


@pytest.mark.django_db
def test_a_rollback_skips_load_now_copies_and_stops_a_forward_switch(sources: dict[str, str]) -> None:
    register(sources["narrow"])  # v1
    register(sources["narrow-b"])  # v2
    switch(2)
    version_changes.reload("enc")  # v3: a copy of v2
    switch(3)
    assert "going back to v1" in rollback()  # v2 computes what v3 does: not a step back
    switch(1)
    register(sources["narrow-b"])  # v4, switching
    assert "stopped the switch to v4" in rollback()
    assert (model().live_version, model().target_version) == (1, 0)


def _spec(live_source: str, new_source: str, allowed: frozenset[int] = frozenset()) -> ModelSpec:
    task = TaskSpec(name="feature-extraction", task="feature-extraction", parameters={}, pooling="mean",
                    normalize=False, policy=BatchPolicy(max_batch_size=8), timeout_s=30.0)
    return ModelSpec(name="enc.v2", source=new_source, revision="", device="", dtype="auto", enabled=True,
                     tasks={"feature-extraction": task}, version=2, rollout=Rollout(live=1, target=2),
                     versions={1: (live_source, "", "auto", "auto"), 2: (new_source, "", "auto", "auto")},
                     shape_changes=allowed)


def test_a_worker_refuses_a_version_of_another_shape_unless_allowed(sources: dict[str, str]) -> None:
    with pytest.raises(output_shape.ShapeRefused) as refused:
        output_shape.check(_spec(sources["narrow"], sources["wide"]))
    assert str(refused.value).startswith(output_shape.REFUSED) and "48-float" in str(refused.value)
    output_shape.check(_spec(sources["narrow"], sources["wide"], frozenset({2})))
    output_shape.check(_spec(sources["narrow"], sources["narrow-b"]))
    output_shape.check(_spec(sources["narrow"], "some/hub-model-not-in-the-cache"))  # unknown: the worker checks later


@pytest.mark.django_db(transaction=True)
def test_a_failed_version_shows_as_failed_in_the_api_and_the_admin(
        make_model: Callable[..., RegisteredModel], heartbeat: Callable[..., Any], admin_client: Client,
        settings: Any) -> None:
    settings.HOSTING_REQUIRE_API_TOKEN = False
    enc = make_model("enc", task="feature-extraction")
    version_changes.record(enc)
    enc.source = "example/other"
    enc.save()
    version_changes.record(enc)  # v2, the target
    enc.source = "example/third"
    enc.save()
    version_changes.record(enc, "canary", 10)  # v3
    refusal = output_shape.REFUSED + "the output shape changes (feature-extraction: v2 answers 48-float vectors ...)"
    ready = {"state": "ready", "error": "", "tasks": ["feature-extraction"]}
    heartbeat({"enc.v1": ready, "enc.v2": {"state": "error", "error": refusal, "tasks": ["feature-extraction"]},
               "enc.v3": {"state": "error", "error": "loading '/secret/path' failed: OSError: x"}})
    body = Client().get("/models/enc").json()
    assert body["state"] == "ready" and body["version"] == 1
    assert body["versions"] == [
        {"version": 1, "role": "live", "state": "ready", "error": ""},
        {"version": 2, "role": "target", "state": "error", "error": refusal},
        {"version": 3, "role": "canary", "state": "error", "error": LOAD_FAILED},  # a load error's text: the admin
    ]
    assert body["error"].startswith("v2 (target) failed: refused:") and "/secret/path" not in json.dumps(body)
    page = admin_client.get(CHANGELIST).content.decode()
    assert "v1 → v2 (failed: refused: the output shape changes" in page
    assert "canary v3 10% (failed: loading &#x27;/secret/path&#x27; failed: OSError: x)" in page


@pytest.mark.django_db(transaction=True)
def test_the_admin_asks_for_a_confirmation_of_a_shape_change(admin_client: Client, sources: dict[str, str]) -> None:
    from tests.integration.admin_session import _FormFields

    register(sources["narrow"])
    url = f"{CHANGELIST}{model().pk}/change/"
    form = _FormFields()
    form.feed(admin_client.get(url).content.decode())
    assert 'name="allow_shape_change"' in admin_client.get(url).content.decode()
    refused = admin_client.post(url, {**form.fields, "source": sources["wide"]})
    assert refused.status_code == 200  # the form again, with the refusal
    assert "v2 answers 48-float vectors where live v1 answers 32-float vectors" in refused.content.decode()
    assert model().source == sources["narrow"] and model().target_version == 0
    allowed = admin_client.post(url, {**form.fields, "source": sources["wide"], "allow_shape_change": "on"})
    assert allowed.status_code == 302
    assert model().target_version == 2 and ModelVersion.objects.get(model__name="enc", number=2).allow_shape_change


def test_record_refuses_an_unknown_mode() -> None:
    with pytest.raises(InvalidInput):
        version_changes.record(RegisteredModel(name="x"), "blue")
