"""The decode batch: rows joining, leaving and yielding their places give the answers generate() gives alone."""

from __future__ import annotations

from typing import Any

import pytest

from tests import model_factory

torch = pytest.importorskip("torch")
from models_registry.inference.decode_batch import DecodeBatch, Row
from models_registry.inference.loading import load_pipeline

PROMPTS = ["The cat sees", "A dog likes the lazy dog and", "Paris", "Once upon a time the blue sky"]


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = model_factory.build_tiny_gpt2(tmp_path_factory.mktemp("decode") / "gpt2", positions=256)
    return load_pipeline("text-generation", str(path), None, "cpu", torch.float32)


def alone(pipe: Any, prompt: str, tokens: int) -> list[int]:
    """generate()'s greedy tokens for one prompt."""
    ids = pipe.tokenizer(prompt, return_tensors="pt")
    out = pipe.model.generate(**ids, max_new_tokens=tokens, do_sample=False, min_new_tokens=tokens)
    return out[0, ids["input_ids"].shape[1]:].tolist()


def run(batch: DecodeBatch, rows: list[Row], plan: dict[int, tuple[list[Row], list[Row]]] | None = None,
        limit: int = 400) -> list[Row]:
    """Steps until every row finished; plan: at step n, (rows joining, rows yielding) besides the first join."""
    plan = plan or {}
    finished: list[Row] = []
    joining, yielding = list(rows), []
    for n in range(limit):
        more, yielding = plan.get(n, ([], []))
        finished += batch.step(joining + more, yielding)
        joining = [r for r in yielding]  # a row that yielded joins again at the next step
        if len(finished) == len(rows) + sum(len(j) for j, _ in plan.values()) and not joining:
            return finished
    raise AssertionError("the rows did not finish")


def row(batch: DecodeBatch, prompt: str, tokens: int, name: str = "", **params: Any) -> Row:
    return batch.prepare(name or prompt, prompt, {"max_new_tokens": tokens, **params}, None)


def test_rows_of_different_lengths_decode_as_each_would_alone(gpt2: Any) -> None:
    batch = DecodeBatch(gpt2)
    rows = [row(batch, p, 6 + 3 * n) for n, p in enumerate(PROMPTS)]
    run(batch, rows)
    for r, p in zip(rows, PROMPTS):
        assert r.sequence.ids == alone(gpt2, p, len(r.sequence.ids)), p
    assert batch.rows == []


def test_a_row_joining_later_and_one_yielding_its_place_still_give_the_same_tokens(gpt2: Any) -> None:
    batch = DecodeBatch(gpt2)
    first = [row(batch, PROMPTS[0], 20), row(batch, PROMPTS[1], 20)]
    late = row(batch, PROMPTS[2], 12)
    plan = {3: ([late], [first[1]]), 6: ([], [first[0]])}
    run(batch, first, plan)
    for r, p in ((first[0], PROMPTS[0]), (first[1], PROMPTS[1]), (late, PROMPTS[2])):
        assert r.sequence.ids == alone(gpt2, p, len(r.sequence.ids)), p
    assert [len(r.sequence.ids) for r in first] == [20, 20]


def test_a_seeded_row_samples_the_same_whatever_runs_beside_it(gpt2: Any) -> None:
    solo = DecodeBatch(gpt2)
    mine = row(solo, PROMPTS[0], 10, do_sample=True, seed=7, temperature=1.3)
    run(solo, [mine])
    crowded = DecodeBatch(gpt2)
    again = row(crowded, PROMPTS[0], 10, do_sample=True, seed=7, temperature=1.3)
    others = [row(crowded, p, 15, do_sample=True, seed=n) for n, p in enumerate(PROMPTS)]
    run(crowded, [again, *others], {2: ([], [again])})
    assert again.sequence.ids == mine.sequence.ids
