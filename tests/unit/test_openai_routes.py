"""The pure parts of the OpenAI-compatible routes: request validation, model ids, the error shape."""

from __future__ import annotations

import pytest

from models_registry.api.pipeline.error_answers import openai_error_body
from models_registry.api.openai.openai_routes import embedding_ids, read_embedding_request
from models_registry.core.batch_types import BatchPolicy
from models_registry.core.errors import InvalidInput, Overloaded, TooLarge
from models_registry.catalog.specs import ModelSpec, TaskSpec


def test_a_minimal_request_defaults_to_float() -> None:
    wanted = read_embedding_request({"model": "m", "input": "hi"}, max_inputs=4)
    assert (wanted.model, wanted.inputs, wanted.encoding_format, wanted.dimensions) == ("m", ["hi"], "float", None)


def test_nulls_mean_not_sent() -> None:
    wanted = read_embedding_request({"model": "m", "input": ["a", ""], "encoding_format": None, "dimensions": None,
                                     "user": None}, max_inputs=4)
    assert wanted.inputs == ["a", ""] and wanted.encoding_format == "float"


@pytest.mark.parametrize("body", [
    {"model": "m", "input": "x", "encoding_format": ""},
    {"model": "m", "input": "x", "dimensions": True},
    {"model": "m", "input": "x", "dimensions": 0},
    {"model": "m", "input": "x", "user": 3},
    {"model": "", "input": "x"},
    {"model": "m", "input": {"text": "x"}},
    [{"model": "m", "input": "x"}],
])
def test_invalid_requests(body: object) -> None:
    with pytest.raises(InvalidInput):
        read_embedding_request(body, max_inputs=4)


def test_more_inputs_than_allowed_is_too_large() -> None:
    with pytest.raises(TooLarge, match="5 inputs"):
        read_embedding_request({"model": "m", "input": ["x"] * 5}, max_inputs=4)


def _task(name: str, task: str = "feature-extraction", pooling: str = "mean") -> TaskSpec:
    return TaskSpec(name=name, task=task, parameters={}, pooling=pooling, normalize=True,
                    policy=BatchPolicy(max_batch_size=8, max_batch_tokens=0, max_batch_delay_s=0.005,
                                       max_queue_size=10), timeout_s=5.0)


def test_embedding_ids_name_the_default_task_by_the_model_alone() -> None:
    tasks = {t.name: t for t in (_task("feature-extraction"), _task("cls", pooling="cls"), _task("tok", pooling="none"),
                                 _task("mask", task="fill-mask"))}
    spec = ModelSpec(name="m", source="s", revision="", device="", dtype="auto", enabled=True, tasks=tasks,
                     default_task="feature-extraction")
    assert embedding_ids(spec) == ["m", "m/cls"]
    not_default = ModelSpec(name="m", source="s", revision="", device="", dtype="auto", enabled=True, tasks=tasks,
                            default_task="mask")
    assert embedding_ids(not_default) == ["m/feature-extraction", "m/cls"]


def test_error_body_is_openais_shape_with_our_slug() -> None:
    body = openai_error_body(Overloaded("queue full"))
    assert body == {"error": {"message": "queue full", "type": "server_error", "param": None, "code": "overloaded"},
                    "error_type": "overloaded"}
    assert openai_error_body(InvalidInput("bad"))["error"]["type"] == "invalid_request_error"
