"""Validation of the registry models: full_clean messages that tell the operator what to change."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from models_registry.models import ApiToken, ModelTask, RegisteredModel

pytestmark = pytest.mark.django_db


def errors_of(obj: Any) -> dict[str, list[str]]:
    """full_clean's messages per field ({} when valid)."""
    try:
        obj.full_clean()
    except ValidationError as error:
        return error.message_dict
    return {}


@pytest.fixture
def model() -> RegisteredModel:
    return RegisteredModel.objects.create(name="bert", source="google-bert/bert-base-uncased")


def task_of(model: RegisteredModel, **fields: Any) -> ModelTask:
    fields.setdefault("name", "fill-mask")
    fields.setdefault("task", "fill-mask")
    return ModelTask(model=model, **fields)


# --- RegisteredModel -------------------------------------------------------------------


def test_a_hub_model_is_valid() -> None:
    assert errors_of(RegisteredModel(name="bert", source="google-bert/bert-base-uncased")) == {}


@pytest.mark.parametrize("device", ["", "cpu", "cuda", "cuda:0", "cuda:12", "mps"])
def test_valid_devices(device: str) -> None:
    assert errors_of(RegisteredModel(name="m", source="org/m", device=device)) == {}


@pytest.mark.parametrize("device", ["gpu", "CUDA", "cuda:", "cuda:one", "cuda0", "xla"])
def test_invalid_devices_say_what_to_use(device: str) -> None:
    assert errors_of(RegisteredModel(name="m", source="org/m", device=device)) == {
        "device": ["Use cpu, cuda, cuda:N or mps (or leave empty)."]
    }


def test_device_is_stored_without_surrounding_spaces() -> None:
    model = RegisteredModel(name="m", source="org/m", device=" cuda:1 ")
    model.full_clean()
    assert model.device == "cuda:1"


def test_missing_local_directory(tmp_path: Path) -> None:
    missing = tmp_path / "gone"
    assert errors_of(RegisteredModel(name="m", source=str(missing))) == {
        "source": [f"Local directory {str(missing)!r} does not exist on this machine."]
    }


def test_a_local_file_is_not_a_model_directory(tmp_path: Path) -> None:
    file = tmp_path / "weights.bin"
    file.write_bytes(b"")
    assert "source" in errors_of(RegisteredModel(name="m", source=str(file)))


def test_existing_local_directory(tmp_path: Path) -> None:
    assert errors_of(RegisteredModel(name="m", source=str(tmp_path))) == {}


def test_home_relative_source_is_expanded() -> None:
    assert "source" in errors_of(RegisteredModel(name="m", source="~/surely-no-such-model-dir-here"))


def test_name_must_be_a_slug() -> None:
    assert list(errors_of(RegisteredModel(name="my model", source="org/m"))) == ["name"]


def test_dtype_must_be_one_of_the_choices() -> None:
    assert "dtype" in errors_of(RegisteredModel(name="m", source="org/m", dtype="int4"))
    assert "backend" in errors_of(RegisteredModel(name="m", source="org/m", backend="tensorrt"))


def test_int8_needs_onnxruntime_on_the_cpu() -> None:
    assert errors_of(RegisteredModel(name="m", source="org/m", dtype="int8")) == {}
    assert errors_of(RegisteredModel(name="m", source="org/m", dtype="int8", backend="onnxruntime", device="cpu")) == {}
    torch_only = errors_of(RegisteredModel(name="m", source="org/m", dtype="int8", backend="torch"))
    assert torch_only == {"dtype": ["int8 runs on ONNX Runtime: set backend to auto or onnxruntime."]}
    assert "CPU only" in errors_of(RegisteredModel(name="m", source="org/m", dtype="int8", device="cuda"))["dtype"][0]


def test_names_are_unique(model: RegisteredModel) -> None:
    assert "name" in errors_of(RegisteredModel(name="bert", source="org/other"))


# --- ModelTask -------------------------------------------------------------------------


def test_defaults_are_valid(model: RegisteredModel) -> None:
    assert errors_of(task_of(model)) == {}


def test_queue_smaller_than_a_batch(model: RegisteredModel) -> None:
    assert errors_of(task_of(model, max_batch_size=64, max_queue_size=32)) == {
        "max_queue_size": [
            "max_queue_size (32) is below max_batch_size (64): a full batch could never be queued. "
            "Raise it or lower max_batch_size."
        ]
    }


def test_queue_equal_to_a_batch_is_fine(model: RegisteredModel) -> None:
    assert errors_of(task_of(model, max_batch_size=64, max_queue_size=64)) == {}


@pytest.mark.parametrize("tokens", [1, 15])
def test_tiny_token_budget(model: RegisteredModel, tokens: int) -> None:
    assert errors_of(task_of(model, max_batch_tokens=tokens)) == {
        "max_batch_tokens": ["Use 0 (no budget) or at least 16 tokens; one input alone exceeds a smaller budget."]
    }


@pytest.mark.parametrize("tokens", [0, 16, 8192])
def test_token_budget_of_zero_or_enough(model: RegisteredModel, tokens: int) -> None:
    assert errors_of(task_of(model, max_batch_tokens=tokens)) == {}


def test_batch_delay_must_be_shorter_than_the_timeout(model: RegisteredModel) -> None:
    assert errors_of(task_of(model, max_batch_delay_ms=1000, timeout_s=1.0)) == {
        "max_batch_delay_ms": ["The batch delay must be shorter than timeout_s, or every request times out."]
    }
    assert errors_of(task_of(model, max_batch_delay_ms=999, timeout_s=1.0)) == {}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_batch_size", 0, "Ensure this value is greater than or equal to 1."),
        ("max_batch_size", 4097, "Ensure this value is less than or equal to 4096."),
        ("max_queue_size", 0, "Ensure this value is greater than or equal to 1."),
        ("max_batch_delay_ms", 10_001, "Ensure this value is less than or equal to 10000."),
        ("timeout_s", 0.05, "Ensure this value is greater than or equal to 0.1."),
        ("timeout_s", 601, "Ensure this value is less than or equal to 600."),
        ("max_batch_tokens", -1, "Ensure this value is greater than or equal to 0."),
    ],
)
def test_out_of_range_settings(model: RegisteredModel, field: str, value: Any, message: str) -> None:
    assert message in errors_of(task_of(model, **{field: value})).get(field, [])


def test_default_parameters_must_be_an_object(model: RegisteredModel) -> None:
    assert errors_of(task_of(model, parameters=[3])) == {
        "parameters": ["Default parameters must be a JSON object, e.g. {\"top_k\": 3}."]
    }


def test_default_parameters_the_task_does_not_take(model: RegisteredModel) -> None:
    assert errors_of(task_of(model, parameters={"temperature": 0.2})) == {
        "parameters": [
            "Default parameters are not valid for fill-mask: fill-mask does not take parameter(s) temperature; "
            "it takes: targets, top_k"
        ]
    }


def test_default_parameters_of_the_wrong_type(model: RegisteredModel) -> None:
    messages = errors_of(task_of(model, task="text-classification", parameters={"top_k": "3"}))["parameters"]
    assert messages == [
        "Default parameters are not valid for text-classification: parameter 'top_k' must be an integer from 1 to 1000"
    ]


def test_valid_default_parameters(model: RegisteredModel) -> None:
    fe = task_of(model, name="embed", task="feature-extraction",
                 parameters={"prompts": {"query": "query: "}, "prompt_name": "query"})
    assert errors_of(fe) == {}


def test_unknown_task_is_a_choice_error_not_a_crash(model: RegisteredModel) -> None:
    found = errors_of(task_of(model, task="image-segmentation", parameters={"top_k": 3}))
    assert list(found) == ["task"]


def test_several_problems_are_reported_together(model: RegisteredModel) -> None:
    found = errors_of(task_of(model, max_batch_size=8, max_queue_size=4, max_batch_tokens=4, parameters={"x": 1}))
    assert set(found) == {"max_queue_size", "max_batch_tokens", "parameters"}


def test_task_name_must_be_a_slug(model: RegisteredModel) -> None:
    assert list(errors_of(task_of(model, name="fill mask"))) == ["name"]


def test_task_names_are_unique_per_model(model: RegisteredModel) -> None:
    task_of(model).save()
    assert errors_of(task_of(model)) == {"__all__": ["Model task with this Model and Name already exists."]}
    other = RegisteredModel.objects.create(name="other", source="org/other")
    assert errors_of(task_of(other)) == {}


@pytest.mark.parametrize("field", ["max_batch_size", "max_queue_size", "timeout_s"])
def test_the_database_refuses_what_validation_would(model: RegisteredModel, field: str) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        task_of(model, **{field: 0}).save()


def test_default_task_is_the_first_registered(model: RegisteredModel) -> None:
    task_of(model, name="first").save()
    task_of(model, name="second").save()
    assert model.default_task().name == "first"


def test_a_model_without_tasks_has_no_default() -> None:
    assert RegisteredModel.objects.create(name="empty", source="org/e").default_task() is None


# --- ApiToken --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("revoked", "expires_in_s", "active"),
    [(False, None, True), (True, None, False), (False, -1, False), (False, 3600, True), (True, 3600, False)],
)
def test_token_is_active(revoked: bool, expires_in_s: float | None, active: bool) -> None:
    expires_at = None if expires_in_s is None else timezone.now() + dt.timedelta(seconds=expires_in_s)
    assert ApiToken(name="t", revoked=revoked, expires_at=expires_at).is_active() is active


def test_generated_tokens_are_distinct_and_prefixed() -> None:
    first, second = ApiToken.generate(), ApiToken.generate()
    assert first != second
    assert first.startswith("hst_") and len(first) >= 40
