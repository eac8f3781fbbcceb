"""Loads models and runs batches: the ONLY module that imports torch and transformers.

Every method here blocks; the engine calls them from its own threads so the worker's
event loop keeps receiving, heart-beating and answering while a model computes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import pipeline

from models_registry.batcher import ItemFailure
from models_registry.errors import HostingError, Internal, InvalidInput
from models_registry.specs import ModelSpec, TaskSpec

logger = logging.getLogger(__name__)

DTYPES: dict[str, Any] = {"auto": "auto", "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class LoadedModel:
    """A model's pipelines (one per pipeline task kind) on one device."""

    spec: ModelSpec
    device: str
    pipelines: dict[str, Any] = field(default_factory=dict)
    counter: Tokenizer | None = None  # a private tokenizer copy for cost estimates
    max_tokens: int = 512

    def count_tokens(self, text: str) -> int:
        """Tokens this text becomes (capped at the model's length), for batch packing."""
        if self.counter is None:
            return max(1, len(text) // 4 + 2)
        return min(len(self.counter.encode(text).ids), self.max_tokens)


def resolve_device(requested: str) -> str:
    """The torch device to use; falls back to cpu when the accelerator is absent."""
    if requested.startswith("cuda") and not torch.cuda.is_available():
        logger.warning("device %s requested but CUDA is not available: using cpu", requested)
        return "cpu"
    if requested == "mps" and not torch.backends.mps.is_available():
        logger.warning("device mps requested but not available: using cpu")
        return "cpu"
    return requested


class PipelineRunner:
    """Builds transformers pipelines and runs batches of inputs through them."""

    def __init__(self, default_device: str = "cpu", torch_threads: int | None = None) -> None:
        self.default_device = default_device
        if torch_threads:
            torch.set_num_threads(torch_threads)

    def load(self, spec: ModelSpec) -> LoadedModel:
        """Load every pipeline task kind the model's tasks use (blocking, may raise)."""
        device = resolve_device(spec.device or self.default_device)
        loaded = LoadedModel(spec=spec, device=device)
        for task in {t.task for t in spec.tasks.values()}:
            pipe = pipeline(
                task,
                model=spec.source,
                revision=spec.revision or None,
                device=device,
                dtype=DTYPES.get(spec.dtype, "auto"),
            )
            pipe.model.eval()
            loaded.pipelines[task] = pipe
        first = next(iter(loaded.pipelines.values()), None)
        tokenizer = getattr(first, "tokenizer", None)
        if tokenizer is not None and hasattr(tokenizer, "backend_tokenizer"):
            counter = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
            counter.no_truncation()
            counter.no_padding()
            loaded.counter = counter
            limit = tokenizer.model_max_length
            loaded.max_tokens = limit if isinstance(limit, int) and 0 < limit < 100_000 else 512
        return loaded

    def run(
        self, loaded: LoadedModel, task: TaskSpec, texts: Sequence[str], parameters: Sequence[dict[str, Any]]
    ) -> list[Any]:
        """Outputs for each input (or ItemFailure), in input order.

        Inputs with equal parameters run together; if a group fails, its inputs are
        retried one by one so a bad input fails only its own request.
        """
        outputs: list[Any] = [None] * len(texts)
        groups: dict[str, list[int]] = {}
        for position, params in enumerate(parameters):
            groups.setdefault(json.dumps(params, sort_keys=True), []).append(position)
        for positions in groups.values():
            params = parameters[positions[0]]
            batch = [texts[p] for p in positions]
            for position, output in zip(positions, self._run_group(loaded, task, batch, params)):
                outputs[position] = output
        return outputs

    def _run_group(self, loaded: LoadedModel, task: TaskSpec, texts: list[str], params: dict[str, Any]) -> list[Any]:
        try:
            return self._compute(loaded, task, texts, params)
        except HostingError as error:
            if len(texts) == 1:
                return [ItemFailure(error)]
        except Exception as error:  # a pipeline error: isolate the input that caused it
            if len(texts) == 1:
                logger.exception("pipeline %s/%s failed on one input", loaded.spec.name, task.name)
                return [ItemFailure(Internal(f"the model failed on this input: {type(error).__name__}: {error}"))]
        results: list[Any] = []
        for text in texts:
            results.extend(self._run_group(loaded, task, [text], params))
        return results

    def _compute(self, loaded: LoadedModel, task: TaskSpec, texts: list[str], params: dict[str, Any]) -> list[Any]:
        pipe = loaded.pipelines[task.task]
        with torch.inference_mode():
            if task.task == "feature-extraction":
                return self._embed(loaded, pipe, task, texts, params)
            if task.task == "fill-mask":
                return self._fill_mask(pipe, texts, params)
            if task.task == "text-classification":
                return self._classify(pipe, texts, params)
        raise Internal(f"task {task.task} is not supported by this worker")

    def _embed(self, loaded: LoadedModel, pipe: Any, task: TaskSpec, texts: list[str], params: dict[str, Any]) -> list[Any]:
        """Tokenize, forward and pool directly: the pipeline's per-item postprocess halves throughput."""
        prompts = params.get("prompts") or {}
        prefix = params.get("prompt") or ""
        if params.get("prompt_name") is not None:
            if params["prompt_name"] not in prompts:
                raise InvalidInput(
                    f"prompt_name {params['prompt_name']!r} is not defined for this task; "
                    f"defined: {', '.join(sorted(prompts)) or 'none'}"
                )
            prefix = prompts[params["prompt_name"]]
        texts = [prefix + t for t in texts] if prefix else texts
        truncate = params.get("truncate")
        truncate = True if truncate is None else truncate
        if not truncate:
            too_long = [len(loaded.counter.encode(t).ids) > loaded.max_tokens for t in texts] if loaded.counter else []
            if any(too_long):
                raise InvalidInput(f"input is longer than the model's {loaded.max_tokens} tokens and truncate is false")
        tokenizer = pipe.tokenizer
        direction = (params.get("truncation_direction") or "right").lower()
        previous_side = tokenizer.truncation_side
        tokenizer.truncation_side = direction
        try:
            encoded = tokenizer(texts, padding=True, truncation=True, max_length=loaded.max_tokens, return_tensors="pt")
        finally:
            tokenizer.truncation_side = previous_side
        encoded = {k: v.to(pipe.model.device) for k, v in encoded.items()}
        hidden = pipe.model(**encoded).last_hidden_state
        mask = encoded["attention_mask"]
        normalize = task.normalize if params.get("normalize") is None else params["normalize"]
        if task.pooling == "none":
            results = []
            for row, length in zip(hidden, mask.sum(dim=1).tolist()):
                tokens = row[:length].float()
                if normalize:
                    tokens = torch.nn.functional.normalize(tokens, p=2, dim=-1)
                array = tokens.cpu().numpy().astype("<f4")
                results.append([array.tobytes(), list(array.shape)])
            return results
        if task.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
        pooled = pooled.float()
        if normalize:
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        array = pooled.cpu().numpy().astype("<f4")
        return [[row.tobytes(), [array.shape[1]]] for row in array]

    def _fill_mask(self, pipe: Any, texts: list[str], params: dict[str, Any]) -> list[Any]:
        mask = pipe.tokenizer.mask_token
        for text in texts:
            if mask not in text:
                raise InvalidInput(f"fill-mask input must contain the mask token {mask}")
        kwargs = {k: params[k] for k in ("top_k", "targets") if params.get(k) is not None}
        raw = pipe(texts, batch_size=len(texts), **kwargs)
        # One text gives a flat list; several give a list per text.
        per_text = [raw] if len(texts) == 1 else raw
        return [to_plain(r) for r in per_text]

    def _classify(self, pipe: Any, texts: list[str], params: dict[str, Any]) -> list[Any]:
        kwargs: dict[str, Any] = {"top_k": params.get("top_k")}  # None = every label, as the HF API
        if params.get("function_to_apply"):
            kwargs["function_to_apply"] = params["function_to_apply"]
        raw = pipe(texts, batch_size=len(texts), truncation=True, **kwargs)
        per_text = [raw] if len(texts) == 1 and raw and isinstance(raw[0], dict) else raw
        return [to_plain(r if isinstance(r, list) else [r]) for r in per_text]


def to_plain(value: Any) -> Any:
    """numpy and torch scalars to Python ones, tuples to lists, keys to str (msgpack-safe)."""
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, torch.Tensor):
        return value.tolist()
    return value
