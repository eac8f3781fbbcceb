"""Task runs of encoder pipelines: fill-mask, text, token and zero-shot classification."""

from __future__ import annotations

from typing import Any

from models_registry.core.errors import InvalidInput
from models_registry.inference.task_common import max_positions, per_input, to_plain

ZERO_SHOT_PAIRS_PER_FORWARD = 256  # (input, label) pairs in one forward pass


def fill_mask(pipe: Any, texts: list[str], params: dict[str, Any]) -> list[Any]:
    """[{score, token, token_str, sequence}, ...] per input."""
    mask = pipe.tokenizer.mask_token
    limit = max_positions(pipe.model, pipe.tokenizer) or 512
    for text in texts:
        if mask not in text:
            raise InvalidInput(f"fill-mask input must contain the mask token {mask}")
        # Truncating could cut the mask away: refuse clearly instead of failing in the model.
        if len(pipe.tokenizer(text)["input_ids"]) > limit:
            raise InvalidInput(f"fill-mask input is longer than the model's {limit} tokens")
    kwargs = {k: params[k] for k in ("top_k", "targets") if params.get(k) is not None}
    try:
        raw = pipe(texts, batch_size=len(texts), **kwargs)
    except ValueError as error:  # e.g. targets that tokenize to nothing
        if "target" in str(error).lower():
            raise InvalidInput(f"parameter 'targets': {error}") from None
        raise
    return [to_plain(r) for r in per_input(raw, len(texts))]


def text_classification(pipe: Any, texts: list[str], params: dict[str, Any]) -> list[Any]:
    """[{label, score}, ...] per input (every label unless top_k)."""
    kwargs: dict[str, Any] = {"top_k": params.get("top_k")}  # None = every label, as the HF API
    if params.get("function_to_apply"):
        kwargs["function_to_apply"] = params["function_to_apply"]
    raw = pipe(texts, batch_size=len(texts), truncation=True, **kwargs)
    return [to_plain(r if isinstance(r, list) else [r]) for r in per_input(raw, len(texts))]


def token_classification(pipe: Any, texts: list[str], params: dict[str, Any]) -> list[Any]:
    """[{entity_group (or entity and index), score, word, start, end}, ...] per input."""
    # "simple" by default, as the hosted HF Inference API: whole words and entities, not word pieces.
    strategy = params.get("aggregation_strategy") or "simple"
    kwargs: dict[str, Any] = {"aggregation_strategy": strategy}
    if params.get("ignore_labels") is not None:
        kwargs["ignore_labels"] = params["ignore_labels"]
    if params.get("stride") is not None:
        if strategy == "none":
            raise InvalidInput("token-classification 'stride' needs an aggregation_strategy other than none")
        kwargs["stride"] = params["stride"]
    raw = pipe(texts, batch_size=len(texts), **kwargs)
    return [to_plain(r) for r in per_input(raw, len(texts))]


def zero_shot_classification(pipe: Any, texts: list[str], params: dict[str, Any]) -> list[Any]:
    """[{label, score}, ...] per input, best first (the HF spec's list, not the pipeline's dict)."""
    labels = params.get("candidate_labels")
    if not labels:
        raise InvalidInput("zero-shot-classification needs parameter candidate_labels")
    kwargs: dict[str, Any] = {"candidate_labels": labels, "multi_label": bool(params.get("multi_label"))}
    if params.get("hypothesis_template"):
        kwargs["hypothesis_template"] = params["hypothesis_template"]
    pairs = min(len(texts) * len(labels), max(ZERO_SHOT_PAIRS_PER_FORWARD, len(labels)))
    raw = pipe(texts, batch_size=pairs, **kwargs)
    per_text = [raw] if isinstance(raw, dict) else raw
    return [[{"label": label, "score": float(score)} for label, score in zip(r["labels"], r["scores"])]
            for r in per_text]
