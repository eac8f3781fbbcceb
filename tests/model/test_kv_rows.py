"""The in-place KV cache: the same logits as transformers' concatenating cache, with no copy per step."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import model_factory

torch = pytest.importorskip("torch")
from transformers import AutoModelForCausalLM

from models_registry.inference import kv_rows


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> object:
    path = model_factory.build_tiny_gpt2(Path(tmp_path_factory.mktemp("gpt2")))
    return AutoModelForCausalLM.from_pretrained(str(path)).eval()


def decode(model: object, grow: bool, steps: int) -> tuple[torch.Tensor, object]:
    """Greedy steps from a prefill of three left-padded rows; the last logits and the cache."""
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]])
    mask = torch.tensor([[1, 1, 1, 1], [0, 1, 1, 1], [0, 0, 1, 1]])
    with torch.inference_mode():
        out = model(input_ids=ids, attention_mask=mask, use_cache=True)
        cache = kv_rows.growing(out.past_key_values) if grow else out.past_key_values
        positions = mask.sum(dim=1, keepdim=True)
        for _ in range(steps):
            token = out.logits[:, -1].argmax(dim=-1, keepdim=True)
            mask = torch.cat([mask, mask.new_ones((3, 1))], dim=1)
            out = model(input_ids=token, attention_mask=mask, position_ids=positions, past_key_values=cache,
                        use_cache=True)
            positions = positions + 1
    return out.logits, cache


def test_growing_cache_gives_the_same_logits_as_the_concatenating_one(gpt2: object) -> None:
    plain, _ = decode(gpt2, grow=False, steps=kv_rows.MIN_ROOM + 10)  # past one reallocation
    grown, cache = decode(gpt2, grow=True, steps=kv_rows.MIN_ROOM + 10)
    assert torch.allclose(plain, grown, atol=1e-5)
    assert all(isinstance(layer, kv_rows.GrowingLayer) for layer in cache.layers)


def test_a_step_writes_into_the_buffer_without_reallocating(gpt2: object) -> None:
    _, cache = decode(gpt2, grow=True, steps=1)
    layer = cache.layers[0]
    buffer, room = layer._key_buffer, layer.room()
    assert room > 1
    with torch.inference_mode():
        layer.update(torch.zeros_like(layer.keys[:, :, :1]), torch.zeros_like(layer.values[:, :, :1]))
    assert layer._key_buffer is buffer and layer.room() == room - 1
    assert float(layer.keys[:, :, -1].abs().sum()) == 0.0


def test_rows_assigned_whole_are_adopted_with_room(gpt2: object) -> None:
    _, cache = decode(gpt2, grow=True, steps=2)
    layer = cache.layers[0]
    kept = layer.keys.index_select(0, torch.tensor([0, 2]))[:, :, 1:]  # a row leaves, a padding column goes
    layer.keys, layer.values = kept, layer.values.index_select(0, torch.tensor([0, 2]))[:, :, 1:]
    assert torch.equal(layer.keys, kept) and layer.room() >= kv_rows.MIN_ROOM
    assert layer.get_seq_length() == kept.shape[-2]


def test_a_longer_row_joins_as_decode_batch_joins_it(gpt2: object) -> None:
    """Keys are assigned first, then the values are built from the old ones: each keeps its own length."""
    _, cache = decode(gpt2, grow=True, steps=2)
    layer = cache.layers[0]
    width = layer.keys.shape[-2]
    longer = torch.ones((1, layer.keys.shape[1], width + 5, layer.keys.shape[-1]))
    pad = torch.nn.functional.pad
    layer.keys = torch.cat([pad(layer.keys, (0, 0, 5, 0)), longer], dim=0)
    assert layer.values.shape[-2] == width  # not the new keys' length
    layer.values = torch.cat([pad(layer.values, (0, 0, 5, 0)), longer], dim=0)
    assert layer.keys.shape == layer.values.shape == (4, longer.shape[1], width + 5, longer.shape[-1])
    with torch.inference_mode():
        keys, values = layer.update(longer[:, :, :1].repeat(4, 1, 1, 1), longer[:, :, :1].repeat(4, 1, 1, 1))
    assert keys.shape[-2] == values.shape[-2] == width + 6


def test_rows_of_different_lengths_joining_in_turn_decode_as_generate_alone(tmp_path: Path) -> None:
    """A short prompt, then a longer one joins (the cache widens), then a short one: greedy tokens equal generate()'s."""
    from transformers import pipeline

    from models_registry.inference.decode_batch import DecodeBatch

    pipe = pipeline("text-generation", model=str(model_factory.build_tiny_gpt2(tmp_path / "g", positions=256)))
    batch = DecodeBatch(pipe)
    prompts = ["a b", "the quick brown fox jumps over the lazy dog and then some more words", "x"]
    rows = []
    with torch.inference_mode():
        for n, prompt in enumerate(prompts):
            row = batch.prepare(f"r{n}", prompt, {"max_new_tokens": 12, "do_sample": False}, None)
            assert batch.prefill(row)
            rows.append(row)
            batch.step()
        while batch.rows:
            batch.step()
        for row, prompt in zip(rows, prompts):
            ids = pipe.tokenizer(prompt, return_tensors="pt")["input_ids"]
            alone = pipe.model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=pipe.tokenizer.eos_token_id)
            assert row.sequence.ids == alone[0, ids.shape[1]:].tolist(), prompt
