"""text-ranking on the HF route: sentence-similarity's inputs become (query, text) pair items."""

from __future__ import annotations

from typing import Any

import pytest

from models_registry.api.hf import payloads
from models_registry.core.errors import InvalidInput, TooLarge
from models_registry.tasks.task_inputs import normalize_inputs, validate_parameters

RANK = "text-ranking"


def test_each_sentence_is_one_pair_item_in_order() -> None:
    items, is_batch = normalize_inputs(RANK, {"source_sentence": "q", "sentences": ["a", "b"]}, 8)
    assert items == [{"query": "q", "text": "a"}, {"query": "q", "text": "b"}] and is_batch


def test_the_answer_is_the_scores_in_sentence_order() -> None:
    assert payloads.shape_response(RANK, [0.25, 0.75], True) == [0.25, 0.75]


@pytest.mark.parametrize(("inputs", "words"), [
    ("just text", "takes 'inputs' as"),
    ({"source_sentence": "q"}, "takes 'inputs' as"),
    ({"source_sentence": 1, "sentences": ["a"]}, "source_sentence must be a string"),
    ({"source_sentence": "q", "sentences": []}, "non-empty list"),
    ({"source_sentence": "q", "sentences": ["a", 2]}, "sentences[1] must be a string"),
])
def test_bad_inputs_are_clear(inputs: Any, words: str) -> None:
    with pytest.raises(InvalidInput, match=words.replace("[", r"\[").replace("]", r"\]")):
        normalize_inputs(RANK, inputs, 8)


def test_too_many_sentences_is_413() -> None:
    with pytest.raises(TooLarge):
        normalize_inputs(RANK, {"source_sentence": "q", "sentences": ["a"] * 9}, 8)


def test_parameters() -> None:
    assert validate_parameters(RANK, {"raw_scores": True, "truncate": False, "truncation_direction": "left"},
                               from_request=True)
    with pytest.raises(InvalidInput, match="raw_scores"):
        validate_parameters(RANK, {"raw_scores": "yes"}, from_request=True)
    with pytest.raises(InvalidInput, match="top_k"):
        validate_parameters(RANK, {"top_k": 3}, from_request=True)


def test_a_full_request() -> None:
    parsed = payloads.read_request({"inputs": {"source_sentence": "q", "sentences": ["a"]},
                                    "parameters": {"raw_scores": True}}, RANK, {"truncate": True}, 8)
    assert parsed.inputs == [{"query": "q", "text": "a"}] and parsed.is_batch
    assert parsed.parameters == {"truncate": True, "raw_scores": True}
