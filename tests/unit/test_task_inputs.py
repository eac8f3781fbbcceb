"""What each task accepts: parameter validation and input normalisation (pure, no torch)."""

from __future__ import annotations

from typing import Any

import pytest

from models_registry.core.errors import InvalidInput, TooLarge
from models_registry.tasks import task_inputs
from models_registry.tasks.task_inputs import normalize_inputs, validate_parameters

FE, FM, TC = "feature-extraction", "fill-mask", "text-classification"
TOK, QA, ZS = "token-classification", "question-answering", "zero-shot-classification"
TG, SUM, TR, T2T = "text-generation", "summarization", "translation", "text2text-generation"


# --- validate_parameters ---------------------------------------------------------------


def test_the_supported_tasks_are_the_ones_the_worker_runs() -> None:
    assert set(task_inputs.SUPPORTED_TASKS) == {FE, FM, TC, TOK, QA, ZS, TG, SUM, TR, T2T, "text-ranking",
                                                "image-classification", "zero-shot-image-classification",
                                                "image-feature-extraction", "object-detection", "image-to-text",
                                                "audio-classification", "automatic-speech-recognition"}


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
        (FE, "dimensions, matryoshka_dimensions, max_active_dims, normalize, prompt, prompt_name, prompts, truncate, truncate_dim, truncation_direction"),
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


@pytest.mark.parametrize("targets", [[], [""], ["ok", 3], {"a": "b"}, 5, "", "  ", ["ok", " \t"], ["w"] * 1001,
                                     ["x" * 101]])
def test_fill_mask_targets_must_be_non_empty_strings(targets: Any) -> None:
    with pytest.raises(InvalidInput, match="'targets' must be a non-empty string or a list of at most 1000 non-blank"):
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


# --- the tasks beyond the first three --------------------------------------------------


@pytest.mark.parametrize(
    ("task", "allowed"),
    [
        (TOK, "aggregation_strategy, ignore_labels, stride"),
        (QA, "align_to_words, doc_stride, handle_impossible_answer, max_answer_len, max_seq_len, top_k"),
        (ZS, "candidate_labels, hypothesis_template, multi_label"),
        (TG, ("do_sample, max_new_tokens, reasoning_format, repetition_penalty, return_full_text, seed, stop, "
              "temperature, tool_call_format, top_k, top_p, typical_p")),
        (SUM, "clean_up_tokenization_spaces, generate_parameters, truncation"),
        (TR, "clean_up_tokenization_spaces, generate_parameters, src_lang, tgt_lang, truncation"),
        (T2T, "clean_up_tokenization_spaces, generate_parameters, truncation"),
    ],
)
def test_each_new_task_refuses_what_it_does_not_take_and_lists_what_it_does(task: str, allowed: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        validate_parameters(task, {"no_such_option": 1})
    assert f"{task} does not take parameter(s) no_such_option; it takes: {allowed}" in caught.value.message


def test_text_generation_unknown_parameters_use_the_phrase_the_hf_client_retries_on() -> None:
    import re

    with pytest.raises(InvalidInput) as caught:
        validate_parameters(TG, {"watermark": True, "details": True})
    # huggingface_hub.InferenceClient.text_generation drops the named parameters and retries.
    match = re.search(r"The following `model_kwargs` are not used by the model: \[(.*?)\]", caught.value.message)
    assert match and [k.strip("' ") for k in match.group(1).split(",")] == ["details", "watermark"]


def test_token_classification_parameters() -> None:
    parameters = {"aggregation_strategy": "max", "ignore_labels": [], "stride": 16}
    assert validate_parameters(TOK, parameters) == parameters


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("aggregation_strategy", "sum", "'aggregation_strategy' must be one of none, simple, first, average, max"),
        ("ignore_labels", "O", "'ignore_labels' must be a list of at most 1000 non-empty strings"),
        ("ignore_labels", [""], "'ignore_labels' must be a list"),
        ("stride", 0, "'stride' must be an integer from 1 to 4096"),
    ],
)
def test_token_classification_wrong_values(name: str, value: Any, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        validate_parameters(TOK, {name: value})


def test_question_answering_parameters() -> None:
    parameters = {"top_k": 3, "doc_stride": 0, "max_answer_len": 30, "max_seq_len": 256,
                  "handle_impossible_answer": True, "align_to_words": False}
    assert validate_parameters(QA, parameters) == parameters


@pytest.mark.parametrize(("name", "value"), [("top_k", 0), ("max_seq_len", 8), ("max_answer_len", 0),
                                             ("handle_impossible_answer", "yes")])
def test_question_answering_wrong_values(name: str, value: Any) -> None:
    with pytest.raises(InvalidInput, match=f"'{name}' must be"):
        validate_parameters(QA, {name: value})


def test_zero_shot_labels_as_a_list_or_a_comma_separated_string() -> None:
    assert validate_parameters(ZS, {"candidate_labels": ["a", "b"]}) == {"candidate_labels": ["a", "b"]}
    labels = validate_parameters(ZS, {"candidate_labels": "sport, politics,"})
    assert labels == {"candidate_labels": ["sport", "politics"]}


@pytest.mark.parametrize("labels", [[], "", " , ", ["a", ""], ["a", 3], ["x"] * 2, [f"l{i}" for i in range(101)], 5])
def test_zero_shot_bad_labels(labels: Any) -> None:
    with pytest.raises(InvalidInput, match="'candidate_labels' must"):
        validate_parameters(ZS, {"candidate_labels": labels})


def test_zero_shot_hypothesis_template_needs_a_placeholder() -> None:
    assert validate_parameters(ZS, {"hypothesis_template": "About {}."}) == {"hypothesis_template": "About {}."}
    with pytest.raises(InvalidInput, match="'hypothesis_template' must be a string with \\{\\}"):
        validate_parameters(ZS, {"hypothesis_template": "About it."})


def test_zero_shot_needs_candidate_labels_from_the_request_or_the_defaults() -> None:
    with pytest.raises(InvalidInput, match="zero-shot-classification needs parameter\\(s\\) candidate_labels in") as e:
        task_inputs.check_required(ZS, {"multi_label": True})
    assert e.value.status == 400
    task_inputs.check_required(ZS, {"candidate_labels": ["a"]})  # no error
    task_inputs.check_required(TC, {})  # nothing required


def test_text_generation_parameters() -> None:
    parameters = {"max_new_tokens": 512, "do_sample": True, "temperature": 0.7, "top_k": 50, "top_p": 1,
                  "typical_p": 0.5, "repetition_penalty": 1.2, "return_full_text": False, "stop": ["\n"],
                  "seed": 42}
    assert validate_parameters(TG, parameters) == parameters


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("max_new_tokens", 513, "'max_new_tokens' must be an integer from 1 to 512"),
        ("max_new_tokens", 0, "'max_new_tokens' must be an integer from 1 to 512"),
        ("temperature", 0, "'temperature' must be a number from 0.001 to 100"),
        ("temperature", "hot", "'temperature' must be a number from 0.001 to 100"),
        # Sampling divides the logits by it: a float32 logit over 1e-45 or 1e-300 is inf, and sampling failed (500).
        ("temperature", 1e-45, "'temperature' must be a number from 0.001 to 100"),
        ("temperature", 1e-300, "'temperature' must be a number from 0.001 to 100"),
        ("repetition_penalty", 1e-300, "'repetition_penalty' must be a number from 0.001 to 100"),
        ("stop", ["\u0000"], "'stop' must be a list of at most 16 non-empty strings of at most 200 characters, "
                             "without control characters"),
        ("top_p", 1.5, "'top_p' must be a number above 0 to 1"),
        ("do_sample", 1, "'do_sample' must be true or false"),
        ("stop", "END", "'stop' must be a list of at most 16 non-empty strings"),
        ("stop", [""], "'stop' must be a list"),
        ("seed", -1, "'seed' must be an integer"),
    ],
)
def test_text_generation_wrong_values(name: str, value: Any, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        validate_parameters(TG, {name: value})


@pytest.mark.parametrize("task", [SUM, TR, T2T])
def test_seq2seq_generate_parameters_are_checked_and_nulls_dropped(task: str) -> None:
    parameters = {"generate_parameters": {"max_new_tokens": 8, "num_beams": 2, "early_stopping": "never",
                                          "temperature": None}, "truncation": "only_first"}
    assert validate_parameters(task, parameters) == {
        "generate_parameters": {"max_new_tokens": 8, "num_beams": 2, "early_stopping": "never"},
        "truncation": "only_first",
    }


@pytest.mark.parametrize(
    ("generate", "message"),
    [
        ({"max_new_tokens": 10_000}, "'max_new_tokens' must be an integer from 1 to 512"),
        ({"stop": ["x"]}, "generate_parameters does not take parameter\\(s\\) stop; it takes: do_sample"),
        ("greedy", "'generate_parameters' must be a JSON object"),
    ],
)
def test_seq2seq_bad_generate_parameters(generate: Any, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        validate_parameters(SUM, {"generate_parameters": generate})


def test_question_answering_inputs_one_object_or_a_list() -> None:
    pair = {"question": "Who?", "context": "Clara lives here."}
    assert normalize_inputs(QA, pair, 8) == ([pair], False)
    assert normalize_inputs(QA, [pair, pair], 8) == ([pair, pair], True)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ("Who?", "question-answering takes 'inputs' as \\{\"question\": ..., \"context\": ...\\}"),
        ({"question": "Who?"}, r"inputs\[0\] must be an object with exactly 'question' and 'context', not \['ques"),
        ({"question": "Who?", "context": "x", "extra": 1}, "inputs\\[0\\] must be an object with exactly"),
        ([{"question": "Who?", "context": "x"}, "Who?"], "inputs\\[1\\] must be an object with exactly .* not str"),
        ({"question": "Who?", "context": "  "}, "inputs\\[0\\].context must be a non-empty string"),
        ({"question": 3, "context": "x"}, "inputs\\[0\\].question must be a non-empty string"),
    ],
)
def test_question_answering_bad_inputs(inputs: Any, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        normalize_inputs(QA, inputs, 8)


@pytest.mark.parametrize("task", [TOK, ZS, TG, SUM, TR, T2T])
def test_text_tasks_take_strings_and_refuse_objects(task: str) -> None:
    assert normalize_inputs(task, ["a", "b"], 8) == (["a", "b"], True)
    with pytest.raises(InvalidInput, match="takes 'inputs' as a string or a list of strings"):
        normalize_inputs(task, {"question": "q", "context": "c"}, 8)


def test_reasoning_format_is_a_text_generation_default_a_request_cannot_send() -> None:
    assert validate_parameters("text-generation", {"reasoning_format": "think-open"}) == {
        "reasoning_format": "think-open"}
    with pytest.raises(InvalidInput, match="reasoning_format"):
        validate_parameters("text-generation", {"reasoning_format": "xml"})
    with pytest.raises(InvalidInput, match="set by the task's registration"):
        validate_parameters("text-generation", {"reasoning_format": "none"}, from_request=True)


def test_tool_call_format_is_a_text_generation_default_a_request_cannot_send() -> None:
    assert validate_parameters("text-generation", {"tool_call_format": "mistral"}) == {"tool_call_format": "mistral"}
    with pytest.raises(InvalidInput, match="tool_call_format"):
        validate_parameters("text-generation", {"tool_call_format": "xml"})
    with pytest.raises(InvalidInput, match="set by the task's registration"):
        validate_parameters("text-generation", {"tool_call_format": "hermes"}, from_request=True)
