"""What a request makes the model compute: prompts, labels x inputs, windows and new tokens are charged."""

from __future__ import annotations

import pytest

from models_registry.core.errors import InvalidInput
from models_registry.catalog.compute_cost import ESTIMATE, TokenCounter, item_cost, request_cost


def words(text: str) -> int:
    """One token per word plus [CLS] and [SEP]: easy to reason about."""
    return len(text.split()) + 2


COUNTER = TokenCounter(words, max_tokens=512, max_new_tokens=20)


def test_a_prompt_is_computed_with_every_input() -> None:
    # The reproduction: 256 one-word inputs behind a 600-word prompt are 256 full-length sequences.
    plain = sum(request_cost("feature-extraction", ["a"] * 256, {}, COUNTER))
    prompted = sum(request_cost("feature-extraction", ["a"] * 256, {"prompt": "word " * 600}, COUNTER))
    assert plain == 256 * 3
    assert prompted == 256 * 512


def test_a_named_prompt_counts_as_its_text() -> None:
    params = {"prompts": {"query": "query: " * 10}, "prompt_name": "query"}
    assert item_cost("feature-extraction", "a", params, COUNTER) == 13


def test_zero_shot_is_charged_per_label() -> None:
    one = item_cost("zero-shot-classification", "a b c", {"candidate_labels": ["x"]}, COUNTER)
    ten = item_cost("zero-shot-classification", "a b c", {"candidate_labels": [f"l{i}" for i in range(10)]}, COUNTER)
    assert ten == 10 * one
    assert item_cost("zero-shot-classification", "a b c", {"candidate_labels": "x, y"}, COUNTER) == 2 * one


def test_question_answering_is_charged_per_window() -> None:
    short = item_cost("question-answering", {"question": "who", "context": "word " * 10}, {}, COUNTER)
    long = item_cost("question-answering", {"question": "who", "context": "word " * 2000}, {}, COUNTER)
    assert short == 1 + 10 + 3
    room = 384 - 1 - 3
    assert long == (1 + -(-(2000 - room) // (room - 128))) * 384


def test_a_question_that_leaves_the_context_no_more_than_the_stride_is_refused() -> None:
    hostile = {"question": "why " * 300, "context": "word " * 400}
    with pytest.raises(InvalidInput, match="doc_stride"):
        item_cost("question-answering", hostile, {}, COUNTER)
    # The same question over a context that fits its one window is computed as usual.
    assert item_cost("question-answering", {"question": "why " * 300, "context": "word " * 5}, {}, COUNTER) > 0
    with pytest.raises(InvalidInput, match="max_seq_len"):
        item_cost("question-answering", {"question": "why " * 400, "context": "word"}, {}, COUNTER)


def test_token_classification_stride_is_charged_per_window_and_bounded_by_the_model() -> None:
    assert item_cost("token-classification", "w " * 600, {}, COUNTER) == 512
    strided = item_cost("token-classification", "w " * 600, {"stride": 100}, COUNTER)
    assert strided == (1 + -(-(600 - 510) // (510 - 100))) * 512
    with pytest.raises(InvalidInput, match="stride must be less than 510"):
        item_cost("token-classification", "w " * 600, {"stride": 510}, COUNTER)
    with pytest.raises(InvalidInput):
        item_cost("token-classification", "short", {"stride": 510}, COUNTER)


def test_generation_is_charged_its_new_tokens() -> None:
    assert item_cost("text-generation", "a b", {"max_new_tokens": 300}, COUNTER) == 4 + 300
    assert item_cost("text-generation", "a b", {}, COUNTER) == 4 + 20  # the model's default length
    assert item_cost("summarization", "a b", {"max_new_tokens": 7}, COUNTER) == 4 + 7


def test_the_webs_estimate_charges_the_prompt_too() -> None:
    plain = sum(request_cost("feature-extraction", ["a"] * 256, {}, ESTIMATE))
    prompted = sum(request_cost("feature-extraction", ["a"] * 256, {"prompt": "word " * 600}, ESTIMATE))
    assert prompted >= 256 * 512 > 100 * plain


@pytest.mark.parametrize(("task", "params", "plain"), [
    ("feature-extraction", {}, True), ("feature-extraction", {"prompt": "q: "}, False),
    ("text-classification", {}, True), ("fill-mask", {"targets": ["a"]}, True),
    ("token-classification", {}, True), ("token-classification", {"stride": 16}, False),
    ("zero-shot-classification", {"candidate_labels": ["a"]}, False), ("question-answering", {}, False),
    ("text-generation", {}, False), ("summarization", {}, False),
])
def test_plain_length_is_the_cost_only_where_nothing_more_is_computed(task: str, params: dict, plain: bool) -> None:
    from models_registry.catalog.compute_cost import is_plain_length

    assert is_plain_length(task, params) is plain
    if plain:
        assert item_cost(task, "a b c", params, COUNTER) == 5
