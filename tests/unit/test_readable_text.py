"""catalog.readable_text: a text is cut to what the model can read before any tokenizer sees it."""

from __future__ import annotations

import pytest

from models_registry.catalog.readable_text import check_prompt_chars, cut_inputs, readable_chars
from models_registry.core.errors import InvalidInput


def test_an_encoder_text_is_cut_on_the_side_truncation_keeps() -> None:
    text = "a" * 100 + "b" * 100
    limit = readable_chars(4)
    assert limit == 128
    assert cut_inputs("feature-extraction", [text], {}, 4) == [text[:limit]]
    assert cut_inputs("feature-extraction", [text], {"truncation_direction": "left"}, 4) == [text[-limit:]]


def test_pairs_are_cut_text_by_text_and_short_inputs_are_the_same_list() -> None:
    short = ["hello"]
    assert cut_inputs("text-classification", short, {}, 4) is short
    pair = {"query": "q", "text": "x" * 500}
    assert cut_inputs("text-ranking", [pair], {}, 4) == [{"query": "q", "text": "x" * 128}]


def test_fill_mask_keeps_both_ends_so_its_mask_survives_and_it_stays_too_long() -> None:
    text = "word " * 200 + "[MASK]."
    cut = cut_inputs("fill-mask", [text], {}, 4)[0]
    assert cut.endswith("[MASK].") and len(cut) > readable_chars(4) // 2 and len(cut) < len(text)


def test_seq2seq_inputs_are_cut_as_encoders_are() -> None:
    assert cut_inputs("summarization", ["x" * 500], {}, 4) == ["x" * 128]


def test_a_prompt_no_model_of_its_positions_can_hold_is_refused_before_any_tokenizer_sees_it() -> None:
    check_prompt_chars(["x" * 128], {}, 4)
    with pytest.raises(InvalidInput, match="129 characters"):
        check_prompt_chars(["x" * 129], {}, 4)
    messages = [{"role": "system", "content": "x" * 100}, {"role": "user", "content": "y" * 100}]
    with pytest.raises(InvalidInput, match="200 characters"):  # chat messages count together
        check_prompt_chars([""], {"messages": messages}, 4)


def test_windowed_and_generation_tasks_are_never_cut() -> None:
    long_text = "x" * 10_000
    for task in ("question-answering", "token-classification", "text-generation"):
        assert cut_inputs(task, [long_text], {}, 4) == [long_text]
