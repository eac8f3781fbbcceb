"""A registration takes its defaults from the model's files; flags override them; the admin shows which is which."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from models_registry.catalog import model_settings
from models_registry.catalog.specs import read_specs
from models_registry.models import ModelTask, RegisteredModel
from tests import hub_layouts

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def bge(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hub_layouts.build(hub_layouts.FAMILIES["bge"], tmp_path_factory.mktemp("bge") / "bge")


def register(*args: str) -> None:
    call_command("register_model", *args, stdout=io.StringIO())


def test_an_unflagged_registration_takes_pooling_normalize_and_prompts_from_the_files(bge: Path) -> None:
    register("bge", "--source", str(bge), "--task", "feature-extraction")
    task = read_specs()["bge"].tasks["feature-extraction"]
    assert (task.pooling, task.normalize) == ("cls", True)
    assert task.parameters["prompts"]["query"] == hub_layouts.BGE_QUERY
    settings = model_settings.settings_of(task)
    assert settings["pooling"] == {"value": "cls", "from": "files"}
    assert settings["normalize"] == {"value": "true", "from": "files"}
    assert settings["do_lower_case"]["from"] == "files" and settings["max_seq_length"]["value"] == "64"


def test_flags_override_the_files_and_say_so(bge: Path) -> None:
    register("bge", "--source", str(bge), "--task", "feature-extraction", "--pooling", "mean", "--no-normalize")
    task = read_specs()["bge"].tasks["feature-extraction"]
    assert (task.pooling, task.normalize) == ("mean", False)
    settings = model_settings.settings_of(task)
    assert settings["pooling"]["from"] == settings["normalize"]["from"] == "registration"


def test_a_directory_without_the_files_keeps_todays_defaults(tmp_path: Path) -> None:
    from tests import model_factory

    source = model_factory.build_feature_extractor(tmp_path / "plain")
    register("plain", "--source", str(source), "--task", "feature-extraction")
    task = read_specs()["plain"].tasks["feature-extraction"]
    assert (task.pooling, task.normalize, task.parameters) == ("mean", False, {})
    assert model_settings.settings_of(task)["pooling"]["from"] == "default"


def test_a_module_the_server_cannot_compute_is_refused_at_registration(tmp_path: Path) -> None:
    source = hub_layouts.build_unsupported(tmp_path / "lstm")
    with pytest.raises(CommandError, match="LSTM"):
        register("lstm", "--source", str(source), "--task", "feature-extraction")
    assert not RegisteredModel.objects.exists()


def test_the_admin_shows_what_the_files_say_and_where_each_setting_came_from(admin_client: Client, bge: Path) -> None:
    register("bge", "--source", str(bge), "--task", "feature-extraction", "--pooling", "mean")
    model = RegisteredModel.objects.get(name="bge")
    html = admin_client.get(f"/admin/models_registry/registeredmodel/{model.pk}/change/").content.decode()
    assert "What the model&#x27;s files say" in html or "What the model's files say" in html
    assert "pooling: mean <i>(registration)</i>" in html
    assert "normalize: true <i>(files)</i>" in html
    assert "do_lower_case: True <i>(files)</i>" in html
    assert ModelTask.objects.get().file_settings["pooling"] == ["cls"]


def test_a_version_whose_files_project_to_another_size_is_refused(tmp_path: Path) -> None:
    """mpnet-style (32 floats) to a LaBSE-style Dense projection (16): the same hidden size, another vector."""
    mpnet = hub_layouts.build(hub_layouts.FAMILIES["mpnet"], tmp_path / "mpnet")
    labse = hub_layouts.build(hub_layouts.FAMILIES["labse"], tmp_path / "labse")
    register("enc", "--source", str(mpnet), "--task", "feature-extraction")
    with pytest.raises(CommandError, match="v2 answers 16-float vectors where live v1 answers 32-float vectors"):
        register("enc", "--source", str(labse), "--task", "feature-extraction")
