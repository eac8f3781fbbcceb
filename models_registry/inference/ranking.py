"""The text-ranking task: a cross-encoder scores (query, text) pairs, the batch items of /rerank."""

from __future__ import annotations

from typing import Any

import torch

from models_registry.core.errors import InvalidInput
from models_registry.inference.task_common import ModelBundle, cpu_threads_for, max_positions

PAIRS_PER_FORWARD = 16  # length-sorted pairs per forward pass: each pads only to its own longest


def check_cross_encoder(model: Any) -> None:
    """Refuse at load a model that does not give one score per pair."""
    labels = getattr(model.config, "num_labels", None)
    if labels != 1:
        raise ValueError(f"text-ranking needs a cross-encoder with one output (num_labels=1); this model has "
                         f"{labels}: serve it as text-classification instead")


def text_ranking(bundle: ModelBundle, pairs: list[dict[str, str]], params: dict[str, Any]) -> list[float]:
    """One score per {"query", "text"} pair: sigmoid of the model's logit, or the logit with raw_scores."""
    tokenizer, model = bundle.tokenizer, bundle.model
    limit = max_positions(model, tokenizer) or 512
    queries = [pair["query"] for pair in pairs]
    texts = [pair["text"] for pair in pairs]
    truncate = params.get("truncate")
    if truncate is False:
        lengths = [len(ids) for ids in tokenizer(queries, texts)["input_ids"]]
        if max(lengths) > limit:
            raise InvalidInput(f"a (query, text) pair has {max(lengths)} tokens, over the model's {limit}, "
                               "and truncate is false")
    previous_side = tokenizer.truncation_side
    tokenizer.truncation_side = (params.get("truncation_direction") or "right").lower()
    try:
        encoded = tokenizer(queries, texts, truncation=True, max_length=limit)
    finally:
        tokenizer.truncation_side = previous_side
    names = [name for name in tokenizer.model_input_names if name in encoded]
    order = sorted(range(len(pairs)), key=lambda i: len(encoded["input_ids"][i]))
    scores: list[float] = [0.0] * len(pairs)
    for start in range(0, len(order), PAIRS_PER_FORWARD):
        chunk = order[start:start + PAIRS_PER_FORWARD]
        padded = tokenizer.pad({name: [encoded[name][i] for i in chunk] for name in names}, return_tensors="pt")
        padded = {name: tensor.to(model.device) for name, tensor in padded.items()}
        with cpu_threads_for(int(padded["input_ids"].numel()), model.device):
            logits = model(**padded).logits[:, 0].float()
        values = logits if params.get("raw_scores") else torch.sigmoid(logits)
        for position, value in zip(chunk, values.tolist()):
            scores[position] = value
    return scores
