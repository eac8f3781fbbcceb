"""inference.row_drawing: rows drawn together give each row what drawing it alone gives, bit for bit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from transformers import LogitsProcessorList, RepetitionPenaltyLogitsProcessor

from models_registry.inference import row_drawing

VOCAB = 151_936  # Qwen2's


@dataclass
class Taken:
    """A decoder that keeps what it is given."""

    tokens: list[tuple[int, float | None]] = field(default_factory=list)

    def take(self, row: int, sequence: Any, token: int, logprob: float | None = None) -> None:
        self.tokens.append((token, logprob))


@dataclass
class Sequence:
    sink: Any = None


@dataclass(eq=False)
class FakeRow:
    """What row_drawing reads and writes of generation_batch's Row."""

    sample: bool = False
    generator: torch.Generator | None = None
    details: bool = True
    token_logprob: bool = True
    processors: LogitsProcessorList = field(default_factory=LogitsProcessorList)
    shaping: Any = None
    decoder: Taken = field(default_factory=Taken)
    sequence: Sequence = field(default_factory=Sequence)
    history: list[int] = field(default_factory=lambda: [1, 2, 3])
    last: int = 0


def one_by_one(row: FakeRow, logits: torch.Tensor) -> tuple[int, float]:
    """What drawing one row gave before rows drew together: a log-softmax, then max or the row's multinomial."""
    scores = logits.float()[None]
    if row.processors:
        scores = row.processors(torch.tensor([row.history]), scores)
    logprobs = torch.log_softmax(scores, dim=-1)
    if row.sample:
        token = int(torch.multinomial(logprobs.exp(), 1, generator=row.generator)[0, 0])
    else:
        token = int(scores.max(dim=-1).indices[0])
    return token, float(logprobs[0, token])


def logits_of(rows: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    logits = (torch.randn(rows, VOCAB, generator=generator) * 3).to(dtype)
    logits[1, 7] = logits[1, 900] = logits[1].max() + 1  # a tie: both pick the first
    return logits


def test_greedy_rows_drawn_together_pick_each_rows_max_and_its_exact_logprob() -> None:
    logits = logits_of(row_drawing.CHUNK * 2 + 3)  # over two chunks of log-softmax
    rows = [FakeRow() for _ in logits]
    row_drawing.draw(rows, logits)
    for row, row_logits in zip(rows, logits):
        assert row.decoder.tokens == [one_by_one(FakeRow(), row_logits)]
        assert row.last == row.decoder.tokens[0][0] and row.history[-1] == row.last
    assert rows[1].last == 7


def test_a_row_that_reports_no_logprobs_gets_its_token_without_one() -> None:
    logits = logits_of(4)
    rows = [FakeRow(details=n % 2 == 0) for n in range(4)]
    row_drawing.draw(rows, logits)
    for n, (row, row_logits) in enumerate(zip(rows, logits)):
        token, logprob = one_by_one(FakeRow(), row_logits)
        assert row.decoder.tokens == [(token, logprob if n % 2 == 0 else None)]


def test_a_streaming_row_reports_logprobs_even_without_details() -> None:
    logits = logits_of(2)
    rows = [FakeRow(details=False, sequence=Sequence(sink=object())), FakeRow(details=False)]
    row_drawing.draw(rows, logits)
    assert rows[0].decoder.tokens == [one_by_one(FakeRow(), logits[0])]
    assert rows[1].decoder.tokens[0][1] is None


def test_a_stream_whose_request_reads_no_token_logprobs_gets_none() -> None:
    logits = logits_of(2)
    rows = [FakeRow(token_logprob=False, sequence=Sequence(sink=object())), FakeRow(token_logprob=False)]
    row_drawing.draw(rows, logits)
    for row, row_logits in zip(rows, logits):
        assert row.decoder.tokens == [(one_by_one(FakeRow(), row_logits)[0], None)]


def test_rows_with_their_own_processors_between_plain_ones_each_get_their_own_draw() -> None:
    logits = logits_of(7)
    penalty = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(penalty=1.3)])
    rows = [FakeRow(processors=penalty if n in (1, 4) else LogitsProcessorList()) for n in range(7)]
    row_drawing.draw(rows, logits)  # the plain rows are not consecutive: gathered, not a view
    for row, row_logits in zip(rows, logits):
        assert row.decoder.tokens == [one_by_one(FakeRow(processors=row.processors), row_logits)]


def test_bfloat16_logits_are_drawn_from_as_one_row_draws_from_them() -> None:
    logits = logits_of(5, dtype=torch.bfloat16)
    rows = [FakeRow() for _ in logits]
    row_drawing.draw(rows, logits)
    assert [row.decoder.tokens[0] for row in rows] == [one_by_one(FakeRow(), row_logits) for row_logits in logits]


def own_logits(step: int) -> torch.Tensor:
    """The seeded row's logits at step, the same whatever else runs (flat enough that draws differ)."""
    return torch.randn(VOCAB, generator=torch.Generator().manual_seed(step))


def seeded_draws(neighbours: list[FakeRow], steps: int = 4) -> list[tuple[int, float | None]]:
    """A seed-42 row's tokens over steps, drawn at index 2 (or last) among neighbours with random logits."""
    row = FakeRow(sample=True, generator=torch.Generator().manual_seed(42))
    where = min(2, len(neighbours))
    rows = neighbours[:where] + [row] + neighbours[where:]
    for step in range(steps):
        logits = torch.randn(len(rows), VOCAB)
        logits[where] = own_logits(step)
        row_drawing.draw(rows, logits)
    return row.decoder.tokens


@pytest.mark.parametrize("neighbours", [
    lambda: [],
    lambda: [FakeRow(), FakeRow(sample=True)],
    lambda: [FakeRow(sample=True) for _ in range(row_drawing.CHUNK + 1)],
    lambda: [FakeRow(sample=True, generator=torch.Generator().manual_seed(7)), FakeRow(details=False),
             FakeRow(sample=True), FakeRow(processors=LogitsProcessorList([RepetitionPenaltyLogitsProcessor(1.2)]))],
])
def test_a_seeded_row_draws_the_same_whatever_rows_beside_it(neighbours: Any) -> None:
    generator = torch.Generator().manual_seed(42)
    expected = [one_by_one(FakeRow(sample=True, generator=generator), own_logits(step)) for step in range(4)]
    torch.manual_seed(999)  # the global generator the unseeded neighbours draw from: no matter
    assert seeded_draws(neighbours()) == expected
    assert len({token for token, _ in expected}) > 1


def test_unseeded_sampled_rows_draw_from_their_softmax_and_report_its_logprob() -> None:
    logits = torch.full((row_drawing.CHUNK + 2, VOCAB), -1e4)
    picks = torch.randint(0, VOCAB, (len(logits),))
    logits[torch.arange(len(logits)), picks] = 0.0  # all the mass on one token a row
    logits[3] = torch.randn(VOCAB)
    rows = [FakeRow(sample=True) for _ in logits]
    row_drawing.draw(rows, logits)
    for n, (row, row_logits) in enumerate(zip(rows, logits)):
        token, logprob = row.decoder.tokens[0]
        assert logprob == float(torch.log_softmax(row_logits[None], dim=-1)[0, token])
        if n != 3:
            assert token == int(picks[n])


@pytest.mark.parametrize("size", [50_257, VOCAB, 3 * row_drawing.BLOCK, 1000])
def test_first_max_is_the_first_index_of_each_rows_maximum_as_max_gives_it(size: int) -> None:
    logits = torch.randn(12, size, generator=torch.Generator().manual_seed(size))
    top = float(logits.max()) + 1
    logits[0, 5] = logits[0, size - 2] = top  # ties, across spans and in the tail
    logits[1, size - 1] = top  # the maximum in the tail
    logits[2, (row_drawing.BLOCK - 1) % size] = logits[2, row_drawing.BLOCK % size] = top  # either side of an edge
    logits[3] = 0.0  # all equal
    logits[4, :] = float("-inf")
    logits[5, 1 + size // 2] = top
    logits[5, size // 2] = top
    logits[6, (2 * row_drawing.BLOCK + 3) % size] = top
    logits[6, 3] = top
    logits[7, 9] = logits[7, size - 1] = float("nan")  # max gives the first nan
    assert torch.equal(row_drawing.first_max(logits), logits.max(dim=-1).indices)
    assert torch.equal(row_drawing.first_max(logits[3:9]), logits[3:9].max(dim=-1).indices)
