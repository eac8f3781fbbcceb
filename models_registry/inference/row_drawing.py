"""Where a generating row's logits become its token: its processors, its structured-output mask, its sampler.

Every row samples with its own parameters and, with a seed, its own generator: a seeded
answer does not depend on what else runs beside it, and greedy answers equal `generate()`'s.

Rows that need nothing of their own (no processors, no grammar or OpenAI logprobs, no seed) draw
together: greedy ones with one first_max over all their logits (max's first index, vectorized),
unseeded sampled ones with one multinomial a CHUNK of rows; log_softmax is computed row by row
inside its kernel, so every value equals the one-row draw's. A token's logprob (TGI's details)
costs a log-softmax over the vocabulary, computed only for the rows whose answer or stream
reports it (a row answering without details, or an OpenAI one, reports none: its tokens' logprobs are left 0.0).
"""

from __future__ import annotations

from typing import Any

import torch

from models_registry.core.errors import GrammarStalled

CHUNK = 16  # rows log-softmaxed at once: a temporary of ~10 MB at Qwen2's 151,936 tokens, not 156 MB at 256 rows
BLOCK = 1024  # first_max's span: the maxima of spans of this many logits, then the max within the winning span


def draw(rows: list[Any], logits: torch.Tensor) -> None:
    """Each row's next token from its row of logits (rows are inference.generation_batch's Row)."""
    logits = logits.float()  # no copy when float32 already; one conversion for the step, not one per row
    greedy, sampled, alone = [], [], []
    for n, row in enumerate(rows):
        if row.shaping is not None or row.processors or row.generator is not None:
            alone.append(n)
        else:
            (sampled if row.sample else greedy).append(n)
    for n in alone:
        draw_one(rows[n], logits[n])
    if greedy:
        _draw_greedy([rows[n] for n in greedy], logits, greedy)
    if sampled:
        _draw_sampled([rows[n] for n in sampled], logits, sampled)


def draw_one(row: Any, logits: torch.Tensor) -> None:
    """One row's token: its structured-output mask, its processors, then greedy or its own sampler.

    A row whose grammar cannot go on draws nothing: it ends with that error (Row.failure), its answer a 400.
    """
    logits = logits.float()[None]
    if row.shaping is not None:
        try:
            row.shaping.mask(logits)
        except GrammarStalled as error:
            row.failure = error
            return
    # The history as a tensor only for processors that read it: making one costs 20 us a row and step.
    scores = row.processors(torch.tensor([row.history], device=logits.device), logits) if row.processors else logits
    logprobs = torch.log_softmax(scores, dim=-1) if row.sample or reports(row) else None
    if row.sample:
        token = int(torch.multinomial(logprobs.exp(), 1, generator=row.generator)[0, 0])
    else:  # the first of equal maxima, as max and argmax give it (and generate()), at a quarter of max's cost
        token = int(first_max(scores)[0])
    if row.shaping is not None:
        row.decoder.token_extras = row.shaping.chosen(token)
    take(row, token, float(logprobs[0, token]) if logprobs is not None and reports(row) else None)


def reports(row: Any) -> bool:
    """Whether row's tokens' logprobs reach anyone: its answer's details or its stream's events, unless its
    request reads none (an OpenAI answer: its logprobs, when asked, are row_shaping's entries)."""
    return row.token_logprob and (bool(row.details) or row.sequence.sink is not None)


def take(row: Any, token: int, logprob: float | None) -> None:
    """The row's drawn token (and its logprob, None when nobody reads it): its text, its next input."""
    row.decoder.take(0, row.sequence, token, logprob)
    row.history.append(token)
    row.last = token


def _draw_greedy(rows: list[Any], logits: torch.Tensor, at: list[int]) -> None:
    """Greedy rows (at: theirs among logits' rows): one max over them, logprobs for those that report them."""
    tokens = first_max(_rows(logits, at)).tolist()
    told = [n for n, row in enumerate(rows) if reports(row)]
    logprobs = dict(zip(told, _logprobs_at(logits, [at[n] for n in told], [tokens[n] for n in told])))
    for n, (row, token) in enumerate(zip(rows, tokens)):
        take(row, token, logprobs.get(n))


def _draw_sampled(rows: list[Any], logits: torch.Tensor, at: list[int]) -> None:
    """Unseeded sampled rows: multinomial over each one's softmax, CHUNK rows a call (the global generator)."""
    drawn: list[int] = []
    chosen: list[float] = []
    for first in range(0, len(at), CHUNK):
        logprobs = torch.log_softmax(_rows(logits, at[first:first + CHUNK]), dim=-1)
        tokens = torch.multinomial(logprobs.exp(), 1)
        drawn += tokens[:, 0].tolist()
        chosen += logprobs.gather(1, tokens)[:, 0].tolist()
    for row, token, logprob in zip(rows, drawn, chosen):
        take(row, token, logprob if reports(row) else None)


def first_max(logits: torch.Tensor) -> torch.Tensor:
    """Each row's index of its first maximum, as `logits.max(dim=-1).indices` gives it, in a quarter of its time.

    max with indices is a scalar loop on a CPU (~380 us a row of 151,936), amax a vectorized one (~80 us):
    amax over spans of BLOCK logits, the first span holding the row's maximum (max over the spans' maxima
    gives the first of equal ones), then max within that span only; a value's first index is the same.
    """
    rows, size = logits.shape
    spans = size // BLOCK
    if spans < 2:
        return logits.max(dim=-1).indices
    whole = spans * BLOCK
    blocks = logits[:, :whole].reshape(rows, spans, BLOCK)  # a view: rows of logits are contiguous
    maxima = blocks.amax(dim=-1)
    if whole < size:
        maxima = torch.cat([maxima, logits[:, whole:].amax(dim=-1, keepdim=True)], dim=1)
    span = maxima.max(dim=-1).indices
    within = blocks[torch.arange(rows, device=logits.device), span.clamp(max=spans - 1)].max(dim=-1).indices
    first = span * BLOCK + within
    if whole < size:  # a row whose maximum first comes in the tail after the last whole span
        first = torch.where(span == spans, logits[:, whole:].max(dim=-1).indices + whole, first)
    return first


def _logprobs_at(logits: torch.Tensor, at: list[int], tokens: list[int]) -> list[float]:
    """log_softmax(logits[at[i]])[tokens[i]] for each i, CHUNK rows a call."""
    out: list[float] = []
    for first in range(0, len(at), CHUNK):
        logprobs = torch.log_softmax(_rows(logits, at[first:first + CHUNK]), dim=-1)
        chosen = torch.tensor(tokens[first:first + CHUNK], device=logits.device)[:, None]
        out += logprobs.gather(1, chosen)[:, 0].tolist()
    return out


def _rows(logits: torch.Tensor, at: list[int]) -> torch.Tensor:
    """logits' rows at (in order): a view when they are consecutive (no copy), else gathered."""
    if at and at[-1] - at[0] == len(at) - 1:
        return logits[at[0]:at[-1] + 1]
    return logits[torch.tensor(at, device=logits.device)]
