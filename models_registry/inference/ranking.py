"""The text-ranking task: (query, text) pairs, the batch items of /rerank, scored by a reranker of either kind.

A one-logit cross-encoder (a sequence classifier with num_labels=1) scores a tokenizer pair by its
logit; a decoder reranker (decoder_ranking) by two tokens' logits at the pair's last position. The
model directory's files (core.model_layout) say which, as they say it to sentence-transformers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

from models_registry.core import model_files, model_layout
from models_registry.core.errors import InvalidInput
from models_registry.inference import decoder_ranking
from models_registry.inference.batched_lora import BatchRows
from models_registry.inference.decoder_ranking import DecoderRanker
from models_registry.inference.task_common import ModelBundle, cpu_threads_for, max_positions

PAIRS_PER_FORWARD = 16  # length-sorted pairs per forward pass: each pads only to its own longest


def load_ranker(source: str, revision: str | None, device: str, dtype: Any) -> ModelBundle | DecoderRanker:
    """The reranker the directory's files say (a decoder reranker, else a one-logit cross-encoder; blocking)."""
    layout = model_layout.parse_layout(model_files.file_reader(source, revision))
    tokenizer = AutoTokenizer.from_pretrained(source, revision=revision)
    config = AutoConfig.from_pretrained(source, revision=revision)
    tokens = decoder_ranking.logit_tokens(layout, config, tokenizer)
    if tokens is not None:
        return decoder_ranking.load(source, revision, device, dtype, tokenizer, layout, tokens)
    model = AutoModelForSequenceClassification.from_pretrained(source, revision=revision, dtype=dtype).to(device).eval()
    check_cross_encoder(model)
    return ModelBundle(model=model, tokenizer=tokenizer)


def check_cross_encoder(model: Any) -> None:
    """Refuse at load a model that does not give one score per pair."""
    labels = getattr(model.config, "num_labels", None)
    if labels != 1:
        raise ValueError(f"text-ranking needs a cross-encoder with one output (num_labels=1); this model has "
                         f"{labels}: serve it as text-classification instead. A decoder reranker (a causal LM "
                         "scored by two tokens) needs its sentence-transformers files: a text-generation "
                         "Transformer and a LogitScore module in modules.json")


def text_ranking(bundle: ModelBundle | DecoderRanker, pairs: list[dict[str, str]],
                 params: dict[str, Any], rows: BatchRows | None = None) -> list[float]:
    """One score per {"query", "text"} pair: the sigmoid of the model's score, or the score itself with raw_scores.

    The score is a cross-encoder's logit, or a decoder reranker's logit(true) - logit(false). rows: the
    batch's LoRA adapters (inference.batched_lora), told which pairs each forward computes.
    """
    tokenizer, model = bundle.tokenizer, bundle.model
    decoder = bundle if isinstance(bundle, DecoderRanker) else None
    if decoder is not None and decoder.message_format is not None:
        encoded = {"input_ids": decoder_ranking.render(decoder, pairs, params)}
    else:  # tokenizer pairs; a decoder's prompt leads the query, as sentence-transformers puts it
        prefix = decoder.prompt if decoder is not None else ""
        limit = decoder.limit if decoder is not None else max_positions(model, tokenizer) or 512
        encoded = _encode_pairs(tokenizer, [prefix + pair["query"] for pair in pairs],
                                [pair["text"] for pair in pairs], limit, params)
    score: Callable[[dict[str, torch.Tensor]], torch.Tensor] = (
        decoder.score if decoder is not None else lambda padded: model(**padded).logits[:, 0].float())
    names = [name for name in tokenizer.model_input_names if name in encoded]
    order = sorted(range(len(pairs)), key=lambda i: len(encoded["input_ids"][i]))
    scores: list[float] = [0.0] * len(pairs)
    for start in range(0, len(order), PAIRS_PER_FORWARD):
        chunk = order[start:start + PAIRS_PER_FORWARD]
        padded = tokenizer.pad({name: [encoded[name][i] for i in chunk] for name in names}, return_tensors="pt")
        padded = {name: tensor.to(model.device) for name, tensor in padded.items()}
        if rows is not None:
            rows.for_inputs(chunk)
        with cpu_threads_for(int(padded["input_ids"].numel()), model.device):
            values = score(padded)
        values = values if params.get("raw_scores") else torch.sigmoid(values)
        for position, value in zip(chunk, values.tolist()):
            scores[position] = value
    return scores


def _encode_pairs(tokenizer: Any, queries: list[str], texts: list[str], limit: int,
                  params: dict[str, Any]) -> dict[str, list[list[int]]]:
    """Tokenizer pairs cut to limit tokens (longest first), refused when over it and truncate is false."""
    if params.get("truncate") is False:
        lengths = [len(ids) for ids in tokenizer(queries, texts)["input_ids"]]
        if max(lengths) > limit:
            raise InvalidInput(f"a (query, text) pair has {max(lengths)} tokens, over the model's {limit}, "
                               "and truncate is false")
    previous_side = tokenizer.truncation_side
    tokenizer.truncation_side = (params.get("truncation_direction") or "right").lower()
    try:
        return tokenizer(queries, texts, truncation=True, max_length=limit)
    finally:
        tokenizer.truncation_side = previous_side
