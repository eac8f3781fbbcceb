"""A ColBERT-style model registered with no flags takes its token-vector settings from its files, and says so."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from models_registry.catalog import model_settings, output_shape
from models_registry.catalog.specs import read_specs
from models_registry.models import RegisteredModel
from tests import colbert_layouts

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def pylate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return colbert_layouts.build(colbert_layouts.LAYOUTS["pylate"], tmp_path_factory.mktemp("pylate") / "pylate")


def register(*args: str) -> None:
    call_command("register_model", *args, stdout=io.StringIO())


def test_a_pylate_save_is_token_vectors_with_its_prefixes_as_prompts(pylate: Path) -> None:
    register("colbert", "--source", str(pylate), "--task", "feature-extraction")
    spec = read_specs()["colbert"]
    task = spec.tasks["feature-extraction"]
    assert (task.pooling, task.normalize) == ("none", True)
    assert task.parameters["prompts"] == {"query": "[Q] ", "document": "[D] "}
    settings = model_settings.settings_of(task)
    assert settings["pooling"] == {"value": "none", "from": "files"}
    assert settings["modules"]["value"] == "Transformer -> Dense -> MultiVectorMask -> Normalize"
    assert settings["multi-vector"] == {"from": "files", "value": (
        "maxsim; queries fixed-expanded to 16 tokens (not attended); document length 40; "
        "32 skiplist tokens left out of documents")}
    assert output_shape.facts(spec, task)["dimensions"] == 16  # the projection's length, per token


def test_a_knob_the_server_does_not_compute_is_refused_at_registration(pylate: Path, tmp_path: Path) -> None:
    import shutil

    source = Path(shutil.copytree(pylate, tmp_path / "odd"))
    config = json.loads((source / "config_sentence_transformers.json").read_text())
    config["query_expansion"] = {"strategy": "grow", "length": 8}
    (source / "config_sentence_transformers.json").write_text(json.dumps(config))
    with pytest.raises(CommandError, match="strategy 'grow'"):
        register("odd", "--source", str(source), "--task", "feature-extraction")
    assert not RegisteredModel.objects.exists()
