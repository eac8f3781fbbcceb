"""Request bodies in, HF Inference API shapes out: parse_body, read_request, shape_response."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pytest

from models_registry.api.pipeline.answer import dump_json
from models_registry.api.hf.payloads import decode_vector, parse_body, read_request, shape_response
from models_registry.core.errors import InvalidInput, TooLarge

FE, FM, TC = "feature-extraction", "fill-mask", "text-classification"
LIMIT = 1024
FORM = "application/x-www-form-urlencoded"  # what `curl -d` sends


# --- parse_body ------------------------------------------------------------------------


def test_json_body() -> None:
    assert parse_body(b'{"inputs": "hi", "parameters": {"top_k": 2}}', "application/json", LIMIT) == {
        "inputs": "hi",
        "parameters": {"top_k": 2},
    }


def test_json_with_charset_and_odd_case() -> None:
    assert parse_body(b'{"inputs": "hi"}', "Application/JSON; charset=utf-8", LIMIT) == {"inputs": "hi"}


def test_json_suffix_media_type() -> None:
    assert parse_body(b'{"inputs": "hi"}', "application/vnd.api+json", LIMIT) == {"inputs": "hi"}


def test_no_content_type_is_read_as_json() -> None:
    assert parse_body(b'{"inputs": ["a", "b"]}', "", LIMIT) == {"inputs": ["a", "b"]}


def test_utf8_text_survives() -> None:
    body = '{"inputs": "Ça coûte 5 € — 東京"}'.encode()
    assert parse_body(body, "application/json", LIMIT) == {"inputs": "Ça coûte 5 € — 東京"}


def test_text_plain_is_a_single_string_input() -> None:
    body = "Paris is the [MASK] of France.".encode()
    assert parse_body(body, "text/plain; charset=utf-8", LIMIT) == {"inputs": "Paris is the [MASK] of France."}


def test_text_plain_that_looks_like_json_is_still_text() -> None:
    assert parse_body(b'{"inputs": "x"}', "text/plain", LIMIT) == {"inputs": '{"inputs": "x"}'}


def test_curl_form_body_with_plain_text_is_a_single_string_input() -> None:
    assert parse_body(b"Paris is the [MASK] of France.", FORM, LIMIT) == {"inputs": "Paris is the [MASK] of France."}


def test_curl_form_body_with_a_json_object_is_json() -> None:
    # `curl -d '{"inputs": ...}'` without -H 'Content-Type: application/json'.
    assert parse_body(b' {"inputs": ["a"], "parameters": {"top_k": 1}}', FORM, LIMIT) == {
        "inputs": ["a"],
        "parameters": {"top_k": 1},
    }


def test_curl_form_body_that_starts_like_json_but_is_not_is_text() -> None:
    assert parse_body(b"{not json", FORM, LIMIT) == {"inputs": "{not json"}


@pytest.mark.parametrize("content_type", ["application/json", "text/plain", FORM, ""])
def test_invalid_utf8_is_a_400_naming_the_byte(content_type: str) -> None:
    with pytest.raises(InvalidInput, match=r"not valid UTF-8 \(byte 11\)"):
        parse_body(b'{"inputs": \xff"}', content_type, LIMIT)


@pytest.mark.parametrize("body", [b"", b"   \n\t"])
def test_empty_json_body(body: bytes) -> None:
    with pytest.raises(InvalidInput, match="request body is empty"):
        parse_body(body, "application/json", LIMIT)


@pytest.mark.parametrize("body", [b'{"inputs": ', b"{'inputs': 'x'}", b'{"inputs": "x"} trailing'])
def test_malformed_json_says_where(body: bytes) -> None:
    with pytest.raises(InvalidInput, match=r"malformed JSON: .* at line 1 column \d+"):
        parse_body(body, "application/json", LIMIT)


def test_body_over_the_limit_is_too_large_before_anything_is_decoded() -> None:
    body = b"\xff" * (LIMIT + 1)  # not UTF-8 either: the size must be checked first
    with pytest.raises(TooLarge) as caught:
        parse_body(body, "application/json", LIMIT)
    assert caught.value.status == 413
    assert f"{LIMIT + 1} bytes" in caught.value.message and f"limit is {LIMIT}" in caught.value.message


def test_body_exactly_at_the_limit_is_accepted() -> None:
    body = b'{"inputs": "' + b"a" * (LIMIT - 14) + b'"}'
    assert len(body) == LIMIT
    assert parse_body(body, "application/json", LIMIT)["inputs"] == "a" * (LIMIT - 14)


@pytest.mark.parametrize("content_type", ["multipart/form-data; boundary=x", "application/xml", "image/png"])
def test_unsupported_content_type(content_type: str) -> None:
    with pytest.raises(InvalidInput, match="unsupported content type .*send application/json or text/plain"):
        parse_body(b'{"inputs": "x"}', content_type, LIMIT)


# --- read_request ----------------------------------------------------------------------


def test_plain_request() -> None:
    request = read_request({"inputs": "hello [MASK]"}, FM, {}, 8)
    assert request.inputs == ["hello [MASK]"]
    assert request.is_batch is False
    assert request.parameters == {}


def test_list_request_is_a_batch() -> None:
    request = read_request({"inputs": ["a", "b"]}, TC, {}, 8)
    assert request.inputs == ["a", "b"] and request.is_batch is True


@pytest.mark.parametrize("payload", [["inputs"], "text", 3, None])
def test_payload_must_be_an_object(payload: Any) -> None:
    with pytest.raises(InvalidInput, match="must be a JSON object"):
        read_request(payload, TC, {}, 8)


def test_unknown_top_level_keys_are_named() -> None:
    with pytest.raises(InvalidInput, match="unknown field\\(s\\) input, top_k; send 'inputs' and 'parameters'"):
        read_request({"inputs": "x", "input": "y", "top_k": 3}, TC, {}, 8)


@pytest.mark.parametrize("key", ["normalize", "truncate", "truncation_direction", "prompt_name"])
def test_feature_extraction_top_level_keys_are_refused_for_other_tasks(key: str) -> None:
    with pytest.raises(InvalidInput, match=f"unknown field\\(s\\) {key}"):
        read_request({"inputs": "x", key: True}, TC, {}, 8)


def test_options_are_accepted_and_ignored() -> None:
    request = read_request({"inputs": "x", "options": {"wait_for_model": True}}, TC, {}, 8)
    assert request.parameters == {}


def test_options_must_be_an_object() -> None:
    with pytest.raises(InvalidInput, match="'options' must be a JSON object"):
        read_request({"inputs": "x", "options": True}, TC, {}, 8)


def test_feature_extraction_top_level_keys_are_merged_into_parameters() -> None:
    payload = {"inputs": "x", "normalize": True, "truncate": False, "truncation_direction": "left",
               "prompt_name": "query"}
    assert read_request(payload, FE, {}, 8).parameters == {
        "normalize": True,
        "truncate": False,
        "truncation_direction": "left",
        "prompt_name": "query",
    }


def test_parameters_win_over_feature_extraction_top_level_keys() -> None:
    payload = {"inputs": "x", "normalize": True, "parameters": {"normalize": False}}
    assert read_request(payload, FE, {}, 8).parameters == {"normalize": False}


def test_a_null_parameter_does_not_hide_a_top_level_key() -> None:
    payload = {"inputs": "x", "normalize": True, "parameters": {"normalize": None}}
    assert read_request(payload, FE, {"normalize": False}, 8).parameters == {"normalize": True}


def test_feature_extraction_top_level_keys_are_validated() -> None:
    with pytest.raises(InvalidInput, match="'normalize' must be true or false"):
        read_request({"inputs": "x", "normalize": "yes"}, FE, {}, 8)


def test_task_defaults_are_merged_under_request_parameters() -> None:
    defaults = {"top_k": 5, "targets": ["Paris"]}
    request = read_request({"inputs": "x [MASK]", "parameters": {"top_k": 2}}, FM, defaults, 8)
    assert request.parameters == {"top_k": 2, "targets": ["Paris"]}


def test_task_defaults_alone_apply_when_the_request_has_none() -> None:
    defaults = {"function_to_apply": "sigmoid"}
    assert read_request({"inputs": "x"}, TC, defaults, 8).parameters == {"function_to_apply": "sigmoid"}


def test_null_parameters_do_not_mask_defaults() -> None:
    defaults = {"top_k": 5, "function_to_apply": "sigmoid"}
    payload = {"inputs": "x", "parameters": {"top_k": None, "function_to_apply": "softmax"}}
    assert read_request(payload, TC, defaults, 8).parameters == {"top_k": 5, "function_to_apply": "softmax"}


def test_defaults_are_not_mutated() -> None:
    defaults = {"top_k": 5}
    read_request({"inputs": "x [MASK]", "parameters": {"top_k": 1, "targets": "a"}}, FM, defaults, 8)
    assert defaults == {"top_k": 5}


def test_unknown_parameter_is_refused_by_read_request() -> None:
    with pytest.raises(InvalidInput, match="does not take parameter\\(s\\) temperature; it takes: targets, top_k"):
        read_request({"inputs": "x", "parameters": {"temperature": 1.0}}, FM, {}, 8)


def test_too_many_inputs_is_too_large() -> None:
    with pytest.raises(TooLarge):
        read_request({"inputs": ["a", "b", "c"]}, TC, {}, 2)


def test_missing_inputs() -> None:
    with pytest.raises(InvalidInput, match="'inputs' is required"):
        read_request({"parameters": {}}, TC, {}, 2)


# --- shape_response --------------------------------------------------------------------


def vector(values: list[float]) -> list[Any]:
    """A worker's feature-extraction output: float32 bytes and the shape."""
    return [np.asarray(values, dtype="<f4").tobytes(), [len(values)]]


def test_decode_vector_reads_little_endian_float32() -> None:
    data = struct.pack("<3f", 0.5, -1.0, 2.25)
    assert decode_vector([data, [3]]).tolist() == [0.5, -1.0, 2.25]


def test_decode_vector_restores_a_token_matrix() -> None:
    matrix = np.arange(6, dtype="<f4").reshape(2, 3)
    assert decode_vector([matrix.tobytes(), [2, 3]]).tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


def test_decode_vector_refuses_a_wrong_shape() -> None:
    with pytest.raises(ValueError):
        decode_vector([np.zeros(4, dtype="<f4").tobytes(), [3]])


def test_feature_extraction_single_input_is_one_list_of_floats() -> None:
    assert json.loads(dump_json(shape_response(FE, [vector([0.25, 0.5])], is_batch=False))) == [0.25, 0.5]


def test_feature_extraction_batch_is_one_list_per_input_in_order() -> None:
    outputs = [vector([1.0, 2.0]), vector([3.0, 4.0])]
    assert json.loads(dump_json(shape_response(FE, outputs, is_batch=True))) == [[1.0, 2.0], [3.0, 4.0]]


def test_feature_extraction_values_are_json_numbers_that_round_trip_to_float32() -> None:
    values = np.random.default_rng(3).standard_normal(384).astype("<f4")
    text = dump_json(shape_response(FE, [[values.tobytes(), [384]]], is_batch=False))
    parsed = json.loads(text)
    assert all(type(v) is float for v in parsed)
    assert np.array_equal(np.asarray(parsed, dtype="<f4"), values)


FILLS = [{"score": 0.9, "token": 3000, "token_str": "capital", "sequence": "paris is the capital of france."}]


def test_fill_mask_single_input_is_a_flat_list() -> None:
    assert shape_response(FM, [FILLS], is_batch=False) == FILLS


def test_fill_mask_batch_is_a_list_per_input() -> None:
    assert shape_response(FM, [FILLS, FILLS[:0]], is_batch=True) == [FILLS, []]


LABELS = [{"label": "POSITIVE", "score": 0.8}, {"label": "NEGATIVE", "score": 0.2}]


def test_text_classification_single_string_is_still_nested() -> None:
    # HF spec: a list of {label, score} lists, one per input, even for one string input.
    assert shape_response(TC, [LABELS], is_batch=False) == [LABELS]


def test_text_classification_batch_is_a_list_per_input() -> None:
    other = [{"label": "NEGATIVE", "score": 0.7}]
    assert shape_response(TC, [LABELS, other], is_batch=True) == [LABELS, other]


# --- the tasks beyond the first three --------------------------------------------------

QA, ZS, TOK, TG = "question-answering", "zero-shot-classification", "token-classification", "text-generation"


def test_question_answering_request_keeps_the_objects() -> None:
    pair = {"question": "Who?", "context": "Clara lives here."}
    request = read_request({"inputs": pair, "parameters": {"top_k": 2}}, QA, {}, 8)
    assert request.inputs == [pair] and request.is_batch is False and request.parameters == {"top_k": 2}


def test_zero_shot_without_candidate_labels_is_a_400() -> None:
    with pytest.raises(InvalidInput, match="needs parameter\\(s\\) candidate_labels"):
        read_request({"inputs": "I love it"}, ZS, {}, 8)


def test_zero_shot_candidate_labels_may_come_from_the_task_defaults() -> None:
    request = read_request({"inputs": "I love it"}, ZS, {"candidate_labels": ["good", "bad"]}, 8)
    assert request.parameters == {"candidate_labels": ["good", "bad"]}


def test_a_null_candidate_labels_does_not_satisfy_the_requirement() -> None:
    with pytest.raises(InvalidInput, match="needs parameter\\(s\\) candidate_labels"):
        read_request({"inputs": "x", "parameters": {"candidate_labels": None}}, ZS, {}, 8)


ANSWER = {"answer": "Berkeley", "score": 0.9, "start": 31, "end": 39}


def test_question_answering_single_input_is_the_answer_object() -> None:
    assert shape_response(QA, [ANSWER], is_batch=False) == ANSWER


def test_question_answering_batch_is_one_answer_per_input() -> None:
    assert shape_response(QA, [ANSWER, [ANSWER, ANSWER]], is_batch=True) == [ANSWER, [ANSWER, ANSWER]]


def test_zero_shot_single_input_is_a_flat_label_list() -> None:
    labels = [{"label": "good", "score": 0.7}, {"label": "bad", "score": 0.3}]
    assert shape_response(ZS, [labels], is_batch=False) == labels
    assert shape_response(ZS, [labels, labels], is_batch=True) == [labels, labels]


def test_token_classification_single_input_is_a_flat_entity_list() -> None:
    entities = [{"entity_group": "PER", "score": 0.9, "word": "Clara", "start": 11, "end": 16}]
    assert shape_response(TOK, [entities], is_batch=False) == entities
    assert shape_response(TOK, [entities, []], is_batch=True) == [entities, []]


def test_text_generation_single_input_is_a_list_of_one_generation() -> None:
    generated = [{"generated_text": "Hello world"}]
    assert shape_response(TG, [generated], is_batch=False) == generated
    assert shape_response(TG, [generated, generated], is_batch=True) == [generated, generated]


@pytest.mark.parametrize(("task", "key"), [("summarization", "summary_text"), ("translation", "translation_text"),
                                          ("text2text-generation", "generated_text")])
def test_seq2seq_answers_are_lists_of_objects_even_for_one_string(task: str, key: str) -> None:
    assert shape_response(task, [{key: "a"}], is_batch=False) == [{key: "a"}]
    assert shape_response(task, [{key: "a"}, {key: "b"}], is_batch=True) == [{key: "a"}, {key: "b"}]
