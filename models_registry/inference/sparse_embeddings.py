"""The feature-extraction run of a sparse (SPLADE) model: MLM logits, log(1 + relu), max or sum over real tokens.

As sentence-transformers 6.2's SparseEncoder computes it (sparse_encoder/modules/splade_pooling.py): the
masked-LM head's logits at every token, masked to the real tokens, relu then log1p (`log1p_relu`: log1p
once more), pooled over the tokens by max or sum into one vocabulary-wide vector per input. Of each
vector only its largest non-zero entries travel (catalog.sparse_answer), as index and value bytes.

The logits are inputs x tokens x vocabulary floats (16 inputs of 512 tokens over BERT's 30,522 words: 1 GB
in float32), so inputs are sorted by length and run in forwards of at most LOGITS_BUDGET floats; the
packed encoders of dense models give hidden states, not the MLM head's logits, and are not used here.
"""

from __future__ import annotations

from typing import Any

import torch

from models_registry.core.errors import InvalidInput
from models_registry.catalog import sparse_answer
from models_registry.catalog.specs import TaskSpec
from models_registry.inference import compute_deadline, prompts
from models_registry.inference.loading import LoadedModel
from models_registry.inference.task_common import cpu_threads_for

LOGITS_BUDGET = 1 << 25  # logits floats per forward: 128 MiB in float32, whatever the lengths
MAX_ROWS = 32  # inputs per forward at most, however short


def rows_per_forward(length: int, vocabulary: int, budget: int = LOGITS_BUDGET, most: int = MAX_ROWS) -> int:
    """How many inputs padded to length tokens one forward takes within budget logits floats (at least one)."""
    return max(1, min(most, budget // max(1, length * vocabulary)))


def embed_sparse(loaded: LoadedModel, bundle: Any, task: TaskSpec, texts: list[str],
                 params: dict[str, Any]) -> list[dict[str, bytes]]:
    """One SparseVector's wire form per input, in input order; prompts and truncation as the dense run applies them."""
    layout = loaded.layout
    prefix = prompts.prompt_prefix(layout, params)
    texts = [prefix + t for t in texts] if prefix else list(texts)
    if params.get("truncate") is False and loaded.counter is not None:
        if any(len(loaded.counter.encode(t).ids) > loaded.max_tokens for t in texts):
            raise InvalidInput(f"input is longer than the model's {loaded.max_tokens} tokens and truncate is false")
    splade = layout.splade or {}
    strategy, activation = splade.get("pooling_strategy", "max"), splade.get("activation_function", "relu")
    vocabulary = loaded.sparse_width or int(bundle.model.config.vocab_size)
    dims = sparse_answer.active_dims(params, layout, vocabulary)
    direction = (params.get("truncation_direction") or "right").lower()
    tokenizer = bundle.tokenizer
    encoded = _tokenize(tokenizer, texts, direction, loaded.max_tokens)
    lengths = [len(ids) for ids in encoded["input_ids"]]
    order = sorted(range(len(texts)), key=lambda i: lengths[i])
    results: list[Any] = [None] * len(texts)
    start = 0
    while start < len(order):
        compute_deadline.check()  # every client of the batch gone: skip the forwards left
        longest = lengths[order[min(len(order), start + MAX_ROWS) - 1]]
        chunk = order[start:start + rows_per_forward(longest, vocabulary)]
        padded = tokenizer.pad({key: [rows[i] for i in chunk] for key, rows in encoded.items()}, return_tensors="pt")
        inputs = {k: v.to(bundle.model.device) for k, v in padded.items()}
        with cpu_threads_for(int(inputs["attention_mask"].numel()), bundle.model.device):
            logits = bundle.model(**inputs).logits
            pooled = splade_pool(logits, inputs["attention_mask"], strategy, activation)
        for position, row in zip(chunk, pooled):
            results[position] = top_entries(row, dims).to_wire()
        start += len(chunk)
    return results


def splade_pool(logits: torch.Tensor, mask: torch.Tensor, strategy: str, activation: str) -> torch.Tensor:
    """SpladePooling: log1p(relu(logits)) of the real tokens (twice log1p for log1p_relu), max or sum over them.

    log1p(relu(x)) never decreases, so the max of it is it of the max: max pooling takes each word's
    largest logit over the real tokens and transforms only that (the same floats, a token-length
    fraction of the work). logits is overwritten (a forward's own output, used once).
    """
    real = mask.unsqueeze(-1).bool()
    if strategy == "max":
        scores = logits.masked_fill_(~real, float("-inf")).amax(dim=1).relu_().log1p_()
        return scores.log1p_() if activation == "log1p_relu" else scores
    scores = logits.mul_(real.to(logits.dtype)).relu_().log1p_()
    return (scores.log1p_() if activation == "log1p_relu" else scores).sum(dim=1)


def top_entries(vector: torch.Tensor, dims: int) -> sparse_answer.SparseVector:
    """vector's non-zero entries, at most dims of them (its largest), in index order."""
    vector = vector.float()
    if int(torch.count_nonzero(vector)) > dims:
        values, indices = torch.topk(vector, dims)  # sentence-transformers' select_max_active_dims
        indices, order = torch.sort(indices)
        values = values[order]
    else:
        indices = torch.nonzero(vector).squeeze(1)
        values = vector[indices]
    return sparse_answer.SparseVector(indices.cpu().numpy().astype("<u4").tobytes(),
                                      values.cpu().numpy().astype("<f4").tobytes())


def _tokenize(tokenizer: Any, texts: list[str], direction: str, max_length: int) -> dict[str, list[list[int]]]:
    """Each text's features (ids, token types...), truncated from the requested side to the model's length."""
    previous = tokenizer.truncation_side
    tokenizer.truncation_side = direction
    try:
        return dict(tokenizer(texts, truncation=True, max_length=max_length))
    finally:
        tokenizer.truncation_side = previous

