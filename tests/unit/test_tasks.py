"""What each task accepts: parameter validation and input normalisation (pure, no torch)."""

from __future__ import annotations

from typing import Any

import pytest

from models_registry import tasks
from models_registry.errors import InvalidInput, TooLarge
from models_registry.tasks import normalize_inputs, validate_parameters

FE, FM, TC = "feature-extraction", "fill-mask", "text-classification"


# --- validate_parameters ---------------------------------------------------------------


def test_the_supported_tasks_are_the_three_the_worker_runs() -> None:
    assert set(tasks.SUPPORTED_TASKS) == {FE, FM, TC}


@pytest.mark.parametrize("task", [FE, FM, TC])
def test_no_parameters_is_an_empty_dict(task: str) -> None:
    assert validate_parameters(task, None) == {}
    assert validate_parameters(task, {}) == {}


@pytest.mark.parametrize("parameters", [[], "top_k=3", 3, True])
def test_parameters_must_be_an_object(parameters: Any) -> None:
    with pytest.raises(InvalidInput, match="'parameters' must be a JSON object"):
        validate_parameters(FM, parameters)


@pytest.mark.parametrize(
    ("task", "allowed"),
    [
        (FE, "normalize, prompt, prompt_name, prompts, truncate, truncation_direction"),
        (FM, "targets, top_k"),
        (TC, "function_to_apply, top_k"),
    ],
)
def test_unknown_parameter_is_a_400_that_lists_the_allowed_ones(task: str, allowed: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        validate_parameters(task, {"temperature": 0.5, "max_new_tokens": 3})
    assert caught.value.status == 400
    assert "max_new_tokens, temperature" in caught.value.message
    assert caught.value.message.endswith(f"it takes: {allowed}")


def test_valid_fill_mask_parameters_pass_through() -> None:
    assert validate_parameters(FM, {"top_k": 3, "targets": ["Paris", "Lyon"]}) == {
        "top_k": 3,
        "targets": ["Paris", "Lyon"],
    }


def test_fill_mask_targets_string_becomes_a_list() -> None:
    assert validate_parameters(FM, {"targets": "Paris"}) == {"targets": ["Paris"]}


@pytest.mark.parametrize("top_k", [0, 101, -1, 2.5, "3", True])
def test_fill_mask_top_k_out_of_range_or_wrong_type(top_k: Any) -> None:
    with pytest.raises(InvalidInput, match="'top_k' must be an integer from 1 to 100"):
        validate_parameters(FM, {"top_k": top_k})


@pytest.mark.parametrize("top_k", [1, 100])
def test_fill_mask_top_k_bounds_are_inclusive(top_k: int) -> None:
    assert validate_parameters(FM, {"top_k": top_k}) == {"top_k": top_k}


def test_null_parameters_are_accepted_for_every_task() -> None:
    # A null means "use the default" (HF clients may send it); dropping it is read_request's job.
    assert validate_parameters(FM, {"top_k": None, "targets": None}) == {"top_k": None, "targets": None}
    assert validate_parameters(TC, {"top_k": None, "function_to_apply": None}) == {
        "top_k": None,
        "function_to_apply": None,
    }
    assert validate_parameters(FE, {"normalize": None, "truncate": None}) == {"normalize": None, "truncate": None}


@pytest.mark.parametrize("targets", [[], [""], ["ok", 3], {"a": "b"}, 5, ""])
def test_fill_mask_targets_must_be_non_empty_strings(targets: Any) -> None:
    with pytest.raises(InvalidInput, match="'targets' must be a non-empty string or list of strings"):
        validate_parameters(FM, {"targets": targets})


def test_text_classification_parameters() -> None:
    assert validate_parameters(TC, {"top_k": 1000, "function_to_apply": "softmax"}) == {
        "top_k": 1000,
        "function_to_apply": "softmax",
    }


@pytest.mark.parametrize("top_k", [0, 1001, "all"])
def test_text_classification_top_k_range(top_k: Any) -> None:
    with pytest.raises(InvalidInput, match="'top_k' must be an integer from 1 to 1000"):
        validate_parameters(TC, {"top_k": top_k})


@pytest.mark.parametrize("function", ["relu", "Softmax", 1])
def test_text_classification_function_to_apply_choices(function: Any) -> None:
    with pytest.raises(InvalidInput, match="'function_to_apply' must be one of sigmoid, softmax, none"):
        validate_parameters(TC, {"function_to_apply": function})


def test_feature_extraction_parameters() -> None:
    parameters = {
        "normalize": True,
        "truncate": False,
        "truncation_direction": "Left",
        "prompt_name": "query",
        "prompt": "passage: ",
        "prompts": {"query": "query: "},
    }
    assert validate_parameters(FE, parameters) == parameters


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("normalize", 1, "'normalize' must be true or false"),
        ("normalize", "true", "'normalize' must be true or false"),
        ("truncate", "yes", "'truncate' must be true or false"),
        ("truncation_direction", "middle", "'truncation_direction' must be one of left, right, Left, Right"),
        ("prompt_name", 3, "'prompt_name' must be a string"),
        ("prompt", ["a"], "'prompt' must be a string"),
        ("prompts", {"query": 1}, "'prompts' must map prompt names to prefix strings"),
        ("prompts", ["query: "], "'prompts' must map prompt names to prefix strings"),
    ],
)
def test_feature_extraction_wrong_types(name: str, value: Any, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        validate_parameters(FE, {name: value})


# --- normalize_inputs ------------------------------------------------------------------


def test_a_string_is_one_input_and_not_a_batch() -> None:
    assert normalize_inputs(FM, "Paris is the [MASK].", 8) == (["Paris is the [MASK]."], False)


def test_a_list_is_a_batch_in_order() -> None:
    assert normalize_inputs(TC, ["b", "a", "c"], 8) == (["b", "a", "c"], True)


def test_a_one_item_list_is_still_a_batch() -> None:
    assert normalize_inputs(TC, ["only"], 8) == (["only"], True)


def test_missing_inputs() -> None:
    with pytest.raises(InvalidInput, match="'inputs' is required"):
        normalize_inputs(TC, None, 8)


def test_empty_list() -> None:
    with pytest.raises(InvalidInput, match="'inputs' must not be an empty list"):
        normalize_inputs(TC, [], 8)


@pytest.mark.parametrize("inputs", [3, 2.5, True, {"text": "hi"}])
def test_inputs_of_the_wrong_type(inputs: Any) -> None:
    with pytest.raises(InvalidInput, match="takes 'inputs' as a string or a list of strings"):
        normalize_inputs(TC, inputs, 8)


@pytest.mark.parametrize(("item", "kind"), [(3, "int"), (None, "NoneType"), (["nested"], "list"), ({"a": 1}, "dict")])
def test_non_string_items_name_their_position_and_type(item: Any, kind: str) -> None:
    with pytest.raises(InvalidInput, match=rf"inputs\[1\] must be a string, not {kind}"):
        normalize_inputs(TC, ["fine", item], 8)


@pytest.mark.parametrize("task", [FM, TC])
def test_blank_inputs_are_refused_where_a_model_needs_text(task: str) -> None:
    with pytest.raises(InvalidInput, match=r"inputs\[0\] is empty"):
        normalize_inputs(task, ["  ", "x"], 8)


def test_feature_extraction_accepts_an_empty_string() -> None:
    assert normalize_inputs(FE, "", 8) == ([""], False)


def test_too_many_inputs_is_too_large() -> None:
    with pytest.raises(TooLarge) as caught:
        normalize_inputs(TC, ["x"] * 9, 8)
    assert caught.value.status == 413
    assert "9 inputs" in caught.value.message and "at most 8" in caught.value.message


def test_exactly_max_inputs_is_accepted() -> None:
    items, is_batch = normalize_inputs(TC, ["x"] * 8, 8)
    assert len(items) == 8 and is_batch
