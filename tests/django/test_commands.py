"""The management commands register_model and create_api_token, against the test database."""

from __future__ import annotations

import datetime as dt
import io
import re
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from models_registry.models import ApiToken, ModelTask, RegisteredModel, hash_token

pytestmark = pytest.mark.django_db

TOKEN_LINE = re.compile(r"^hst_[A-Za-z0-9_\-]{40,}$")


def register(*args: str) -> str:
    out = io.StringIO()
    call_command("register_model", *args, stdout=out)
    return out.getvalue()


def create_token(*args: str) -> str:
    out = io.StringIO()
    call_command("create_api_token", *args, stdout=out)
    return out.getvalue()


# --- register_model --------------------------------------------------------------------


def test_register_model_creates_the_model_and_its_task() -> None:
    out = register("bert", "--source", "google-bert/bert-base-uncased", "--task", "fill-mask",
                   "--max-batch-size", "8", "--max-queue-size", "64", "--timeout", "12.5", "--device", "cuda:1",
                   "--dtype", "float16", "--parameters", '{"top_k": 3}')
    assert out.strip() == "registered bert/fill-mask (fill-mask) from google-bert/bert-base-uncased"
    model = RegisteredModel.objects.get(name="bert")
    assert (model.source, model.device, model.dtype, model.enabled) == (
        "google-bert/bert-base-uncased", "cuda:1", "float16", True,
    )
    task = model.tasks.get()
    assert (task.name, task.task, task.max_batch_size, task.max_queue_size, task.timeout_s, task.parameters) == (
        "fill-mask", "fill-mask", 8, 64, 12.5, {"top_k": 3},
    )


def test_register_model_is_idempotent_and_updates_settings() -> None:
    args = ["bert", "--source", "google-bert/bert-base-uncased", "--task", "fill-mask", "--max-batch-size", "8"]
    register(*args)
    register(*args)
    assert RegisteredModel.objects.count() == 1
    assert ModelTask.objects.count() == 1

    register(*args[:-1], "16", "--max-batch-delay-ms", "20", "--revision", "v2")
    assert RegisteredModel.objects.count() == 1
    task = ModelTask.objects.get()
    assert task.max_batch_size == 16
    assert task.max_batch_delay_ms == 20
    assert RegisteredModel.objects.get().revision == "v2"


def test_options_left_out_on_a_rerun_keep_their_values() -> None:
    register("bert", "--source", "org/bert", "--task", "fill-mask", "--max-batch-size", "8", "--device", "cpu",
             "--parameters", '{"top_k": 2}')
    register("bert", "--source", "org/bert", "--task", "fill-mask")
    task = ModelTask.objects.get()
    assert task.max_batch_size == 8
    assert task.parameters == {"top_k": 2}
    assert RegisteredModel.objects.get().device == "cpu"


def test_task_name_adds_a_second_task_to_one_model() -> None:
    register("minilm", "--source", "org/minilm", "--task", "feature-extraction", "--pooling", "mean", "--normalize")
    register("minilm", "--source", "org/minilm", "--task", "feature-extraction", "--task-name", "cls-pooled",
             "--pooling", "cls")
    model = RegisteredModel.objects.get()
    tasks = {t.name: t for t in model.tasks.all()}
    assert set(tasks) == {"feature-extraction", "cls-pooled"}
    assert (tasks["feature-extraction"].pooling, tasks["feature-extraction"].normalize) == ("mean", True)
    assert (tasks["cls-pooled"].pooling, tasks["cls-pooled"].normalize) == ("cls", None)  # unset: what the files say
    assert model.default_task().name == "feature-extraction"  # the first registered stays the default


def test_disabled_flag() -> None:
    register("bert", "--source", "org/bert", "--task", "fill-mask", "--disabled")
    assert RegisteredModel.objects.get().enabled is False


def test_an_existing_local_directory_is_a_valid_source(tmp_path: Path) -> None:
    register("local", "--source", str(tmp_path), "--task", "text-classification")
    assert RegisteredModel.objects.get().source == str(tmp_path)


def test_queue_smaller_than_a_batch_is_refused_and_nothing_is_saved() -> None:
    with pytest.raises(CommandError, match=r"max_queue_size: max_queue_size \(4\) is below max_batch_size \(8\)"):
        register("bert", "--source", "org/bert", "--task", "fill-mask", "--max-batch-size", "8",
                 "--max-queue-size", "4")
    assert not RegisteredModel.objects.exists()
    assert not ModelTask.objects.exists()


def test_a_failed_update_leaves_the_previous_settings() -> None:
    register("bert", "--source", "org/bert", "--task", "fill-mask", "--max-batch-size", "8")
    with pytest.raises(CommandError):
        register("bert", "--source", "org/other", "--task", "fill-mask", "--max-queue-size", "2")
    assert RegisteredModel.objects.get().source == "org/bert"
    assert ModelTask.objects.get().max_queue_size == 1024


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "cuda:", "tpu:0"])
def test_bad_device_is_refused(device: str) -> None:
    with pytest.raises(CommandError, match=r"device: Use cpu, cuda, cuda:N or mps \(or leave empty\)\."):
        register("bert", "--source", "org/bert", "--task", "fill-mask", "--device", device)
    assert not RegisteredModel.objects.exists()


def test_missing_local_directory_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(CommandError, match=f"source: Local directory '{re.escape(str(missing))}' does not exist"):
        register("local", "--source", str(missing), "--task", "fill-mask")
    assert not RegisteredModel.objects.exists()


def test_parameters_that_are_not_json_are_refused() -> None:
    with pytest.raises(CommandError, match="--parameters is not valid JSON"):
        register("bert", "--source", "org/bert", "--task", "fill-mask", "--parameters", "{top_k: 3}")
    assert not RegisteredModel.objects.exists()


def test_parameters_that_are_not_an_object_are_refused() -> None:
    with pytest.raises(CommandError, match="parameters: Default parameters must be a JSON object"):
        register("bert", "--source", "org/bert", "--task", "fill-mask", "--parameters", "[3]")


def test_parameters_the_task_does_not_take_are_refused() -> None:
    message = r"parameters: Default parameters are not valid for fill-mask: .*temperature"
    with pytest.raises(CommandError, match=message):
        register("bert", "--source", "org/bert", "--task", "fill-mask", "--parameters", '{"temperature": 0.1}')


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--max-batch-size", "0", "max_batch_size: Ensure this value is greater than or equal to 1."),
        ("--max-batch-tokens", "8", "max_batch_tokens: Use 0 (no budget) or at least 16 tokens"),
        ("--timeout", "0", "timeout_s: Ensure this value is greater than or equal to 0.1."),
        ("--max-batch-delay-ms", "5000", "max_batch_delay_ms: The batch delay must be shorter than timeout_s"),
        ("--task-name", "not a slug", "name: Enter a valid “slug”"),
    ],
)
def test_impossible_task_settings_are_refused_with_what_to_change(option: str, value: str, message: str) -> None:
    args = ["bert", "--source", "org/bert", "--task", "fill-mask", "--timeout", "2", option, value]
    with pytest.raises(CommandError, match=re.escape(message)):
        register(*args)


def test_unknown_task_is_refused_by_the_parser() -> None:
    with pytest.raises(CommandError, match="invalid choice: 'image-segmentation'"):
        register("seg", "--source", "org/segformer", "--task", "image-segmentation")


def test_bad_model_name_is_refused() -> None:
    with pytest.raises(CommandError, match="name: Enter a valid “slug”"):
        register("my model", "--source", "org/bert", "--task", "fill-mask")


# --- create_api_token ------------------------------------------------------------------


def test_create_api_token_prints_the_token_alone_on_the_last_line() -> None:
    out = create_token("ci")
    raw = out.splitlines()[-1]
    assert TOKEN_LINE.match(raw), out
    assert out.endswith(raw + "\n")
    assert "every model" in out.splitlines()[0]


def test_only_the_hash_of_the_token_is_stored() -> None:
    raw = create_token("ci").splitlines()[-1]
    token = ApiToken.objects.get(name="ci")
    assert token.token_hash == hash_token(raw)
    assert token.prefix == raw[:10]
    for value in ApiToken.objects.filter(pk=token.pk).values().get().values():
        assert raw not in str(value)


def test_models_option_limits_the_token() -> None:
    register("a", "--source", "org/a", "--task", "fill-mask")
    register("b", "--source", "org/b", "--task", "fill-mask")
    register("c", "--source", "org/c", "--task", "fill-mask")
    out = create_token("limited", "--models", "a, b")
    assert "for a, b" in out
    token = ApiToken.objects.get(name="limited")
    assert {m.name for m in token.allowed_models.all()} == {"a", "b"}


def test_a_token_without_models_may_use_every_model() -> None:
    register("a", "--source", "org/a", "--task", "fill-mask")
    create_token("all")
    assert not ApiToken.objects.get(name="all").allowed_models.exists()


def test_unknown_model_is_an_error_and_creates_no_token() -> None:
    register("a", "--source", "org/a", "--task", "fill-mask")
    with pytest.raises(CommandError, match="unknown model\\(s\\): nope, zzz"):
        create_token("bad", "--models", "a,zzz,nope")
    assert not ApiToken.objects.exists()


def test_running_again_rotates_the_token_of_that_name() -> None:
    first = create_token("ci").splitlines()[-1]
    ApiToken.objects.filter(name="ci").update(revoked=True)
    second = create_token("ci").splitlines()[-1]
    assert first != second
    token = ApiToken.objects.get(name="ci")
    assert token.token_hash == hash_token(second)
    assert not ApiToken.objects.filter(token_hash=hash_token(first)).exists()
    assert token.is_active()


def test_rotating_an_expired_token_prints_one_that_works() -> None:
    create_token("ci")
    ApiToken.objects.filter(name="ci").update(expires_at=timezone.now() - dt.timedelta(days=1))
    create_token("ci")
    assert ApiToken.objects.get(name="ci").is_active()


def test_rotating_keeps_a_future_expiry() -> None:
    create_token("ci")
    later = timezone.now() + dt.timedelta(days=30)
    ApiToken.objects.filter(name="ci").update(expires_at=later)
    create_token("ci")
    assert ApiToken.objects.get(name="ci").expires_at == later
