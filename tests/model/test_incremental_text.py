"""The text decoded a few tokens at a time equals the whole sequence decoded, token after token."""

from __future__ import annotations

import random

import pytest
from transformers import AutoTokenizer

from models_registry.inference.incremental_text import IncrementalText
from tests import model_factory


@pytest.fixture(scope="module", params=["byte-level BPE", "WordPiece"])
def tokenizer(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> object:
    if request.param == "WordPiece":
        return AutoTokenizer.from_pretrained(str(model_factory.minilm_path()))
    return AutoTokenizer.from_pretrained(str(model_factory.build_tiny_gpt2(tmp_path_factory.mktemp("gpt2") / "m")))


TEXTS = ["Hello there, how are you today? I'm fine: 3.5 % better, thanks.",
         "Déjà vu — naïve café, 東京 and emoji 🎉🎉 in one line.",
         "  spaces   and\nnew lines\tand tabs . , ! ?"]


def decode(tokenizer: object) -> object:
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=True)  # type: ignore[attr-defined]


def special(tokenizer: object) -> set[int]:
    """The tokens StepDecoder leaves out before decoding (the emoji is WordPiece's [UNK], one of them)."""
    return set(tokenizer.all_special_ids)  # type: ignore[attr-defined]


@pytest.mark.parametrize("text", TEXTS)
def test_real_texts_grow_exactly_as_their_whole_decode(tokenizer: object, text: str) -> None:
    ids = [t for t in tokenizer(text, add_special_tokens=False)["input_ids"]  # type: ignore[operator]
           if t not in special(tokenizer)]
    incremental = IncrementalText(decode(tokenizer))
    for n, token in enumerate(ids, start=1):
        assert incremental.add(token) == decode(tokenizer)(ids[:n])  # type: ignore[operator]


def test_random_tokens_grow_exactly_as_their_whole_decode(tokenizer: object) -> None:
    rng = random.Random(5)
    vocab = len(tokenizer)  # type: ignore[arg-type]
    for _ in range(20):
        ids = [t for t in (rng.randrange(vocab) for _ in range(rng.randint(1, 60))) if t not in special(tokenizer)]
        incremental = IncrementalText(decode(tokenizer))
        for n, token in enumerate(ids, start=1):
            assert incremental.add(token) == decode(tokenizer)(ids[:n])  # type: ignore[operator]


def test_each_token_decodes_a_short_window(tokenizer: object) -> None:
    seen: list[int] = []

    def counting(ids: list[int]) -> str:
        seen.append(len(ids))
        return decode(tokenizer)(ids)  # type: ignore[operator]

    incremental = IncrementalText(counting)
    for token in tokenizer("word " * 400, add_special_tokens=False)["input_ids"]:  # type: ignore[operator]
        incremental.add(token)
    assert max(seen) <= 4 and incremental.settled.strip().split() == ["word"] * 400
