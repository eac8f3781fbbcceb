"""OpenAI's per-row options in a decode batch: logprobs from the very logits each token was drawn from."""

from __future__ import annotations

from typing import Any

import pytest

from tests import model_factory

torch = pytest.importorskip("torch")
from models_registry.inference.decode_batch import DecodeBatch, Row  # noqa: E402
from models_registry.inference.loading import load_pipeline  # noqa: E402


class Sink:
    """Collects a row's events."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def put(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def cancelled(self) -> bool:
        return False


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = model_factory.build_tiny_gpt2(tmp_path_factory.mktemp("shaping") / "gpt2", positions=256)
    return load_pipeline("text-generation", str(path), None, "cpu", torch.float32)


def run(batch: DecodeBatch, rows: list[Row]) -> None:
    """Prefill every row, then step until all finished (the decode loop's calls, in one thread)."""
    for row in rows:
        batch.prefill(row)
    while batch.rows:
        batch.step()


def test_logprobs_are_the_models_raw_log_softmax_beside_a_row_without(gpt2: Any) -> None:
    batch = DecodeBatch(gpt2)
    sinks = [Sink(), Sink()]
    asked = batch.prepare("a", "The cat sees", {"max_new_tokens": 6, "do_sample": False, "logprobs": 3}, sinks[0])
    free = batch.prepare("b", "A dog likes the lazy dog and", {"max_new_tokens": 6, "do_sample": False}, sinks[1])
    run(batch, [asked, free])
    assert all("logprobs" not in e["token"] for e in sinks[1].events)
    events = sinks[0].events
    ids = gpt2.tokenizer("The cat sees")["input_ids"]
    with torch.inference_mode():
        for event in events:
            expected = torch.log_softmax(gpt2.model(torch.tensor([ids])).logits[0, -1].float(), dim=-1)
            token = event["token"]["id"]
            entry = event["token"]["logprobs"]
            assert entry["logprob"] == pytest.approx(float(expected[token]), abs=1e-4)
            assert entry["bytes"] == list(gpt2.tokenizer.decode([token]).encode())
            top_ids = expected.topk(3).indices.tolist()
            assert [lp for _, lp in entry["top"]] == pytest.approx(expected[top_ids].tolist(), abs=1e-4)
            assert entry["top"][0][0] == entry["bytes"]  # greedy: the token is the most likely one
            ids.append(token)
