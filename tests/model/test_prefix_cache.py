"""Prefix caching: a prompt that shares a kept head gets the logits of a full prefill, computing only its tail."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import model_factory

torch = pytest.importorskip("torch")
from transformers import pipeline

from models_registry.inference.decode_batch import DecodeBatch
from models_registry.inference.prefix_cache import BLOCK_TOKENS, MIN_BLOCKS, PrefixCache


def layers(tokens: int, fill: float = 1.0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Two layers of keys and values for one row of `tokens` tokens."""
    return [(torch.full((1, 2, tokens, 4), fill), torch.full((1, 2, tokens, 4), -fill)) for _ in range(2)]


def test_a_kept_head_is_found_by_a_prompt_that_shares_it_and_only_by_one() -> None:
    cache = PrefixCache(budget_bytes=2**20)
    head = list(range(3 * BLOCK_TOKENS))
    cache.store(head + [1, 2, 3], layers(len(head) + 3))
    hit = cache.lookup(head + [7, 8])
    assert hit is not None and hit.tokens == 3 * BLOCK_TOKENS
    assert hit.layers[0][0].shape[-2] == 3 * BLOCK_TOKENS
    assert cache.lookup([9] + head[1:] + [7]) is None  # another first token: another prefix
    shorter = cache.lookup(head[:2 * BLOCK_TOKENS] + [5] * 80)  # a shorter shared head is not stored on its own
    assert shorter is None


def test_heads_shorter_than_the_minimum_are_not_kept_and_the_budget_evicts_the_oldest() -> None:
    cache = PrefixCache(budget_bytes=2**20)
    cache.store(list(range(MIN_BLOCKS * BLOCK_TOKENS)), layers(MIN_BLOCKS * BLOCK_TOKENS))  # last token is not kept
    assert not cache.entries
    one = 2 * 2 * (2 * 128 * 4 * 4)  # two layers, keys and values: 2 heads x 128 tokens x 4 floats
    cache = PrefixCache(budget_bytes=2 * one)
    for first in (1, 2, 3):
        cache.store([first] * (2 * BLOCK_TOKENS + 1), layers(2 * BLOCK_TOKENS + 1))
    assert cache.bytes <= 2 * one and len(cache.entries) == 2
    assert cache.lookup([1] * (2 * BLOCK_TOKENS + 5)) is None  # the oldest went
    assert cache.lookup([3] * (2 * BLOCK_TOKENS + 5)) is not None


def test_a_shared_head_gives_the_same_first_token_distribution_as_a_full_prefill(tmp_path: Path) -> None:
    path = model_factory.build_tiny_gpt2(tmp_path / "gpt2", positions=512)
    pipe = pipeline("text-generation", model=str(path))
    batch, fresh = DecodeBatch(pipe), DecodeBatch(pipe)
    fresh.prefixes = PrefixCache(budget_bytes=0)
    system = list(range(10, 10 + 3 * BLOCK_TOKENS + 9))
    with torch.inference_mode():
        batch._prompt_forward(system + [40, 41])
        assert len(batch.prefixes.entries) == 1
        shared = batch._prompt_forward(system + [50, 51, 52])
        full = fresh._prompt_forward(system + [50, 51, 52])
    assert batch.prefixes.hits == 1
    assert shared.logits.shape[1] == 3 + 9  # only the tail after the kept blocks was computed
    assert torch.allclose(shared.logits[0, -1], full.logits[0, -1], atol=1e-4)
    assert shared.past_key_values.get_seq_length() == full.past_key_values.get_seq_length()
