"""The feature-extraction run: tokenize, forward and pool directly, packed where the model allows.

The pipeline's own postprocess runs per item, which costs as much as the forward on small
inputs; here a batch becomes packed rows (or length-sorted padded micro-batches) and
pooled vectors as float32 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from models_registry.catalog import model_settings
from models_registry.core.errors import InvalidInput
from models_registry.inference import compute_deadline, intake_tokens, packing, prompts, sentence_head
from models_registry.inference.backend import PackedEncoder
from models_registry.inference.batched_lora import BatchRows
from models_registry.inference.loading import LoadedModel
from models_registry.inference.packed_forward import packed_inputs
from models_registry.inference.task_common import cpu_threads_for
from models_registry.catalog.specs import TaskSpec

# Sentences per padded forward inside a worker batch: larger micro-batches pad more, smaller
# ones pay the per-forward cost more often (8-16 is the best range on CPU in bench runs).
MICRO_BATCH = 16


@dataclass(frozen=True)
class Recipe:
    """How token embeddings become an input's vector: the pooling modes, the prompt left out, Dense, normalize."""

    modes: tuple[str, ...]
    normalize: bool
    prompt_length: int | None = None  # include_prompt false: the prompt's tokens are not pooled
    dense: sentence_head.DenseHead | None = None

    @property
    def tokens(self) -> bool:
        """Token vectors, not pooled ones (pooling none)."""
        return self.modes == ("none",)

    @property
    def plain(self) -> str | None:
        """"mean" or "cls" where the packed forward pools in place (no prompt left out); else None."""
        return self.modes[0] if self.modes in (("mean",), ("cls",)) and not self.prompt_length else None


def embed(loaded: LoadedModel, pipe: Any, task: TaskSpec, texts: list[str], params: dict[str, Any],
          rows: BatchRows | None = None) -> list[Any]:
    """One vector (or token vectors) per input as [float32 bytes, shape]; prompts, truncation and normalize applied.

    rows: the batch's LoRA adapters (inference.batched_lora), told which inputs each forward computes.

    The pooling, the prompts, the projection and normalize are the operator's where set, else what the
    model's files said at this load (loaded.layout), else the registration's.
    """
    layout = loaded.layout
    prefix = prompts.prompt_prefix(layout, params)
    texts = [prefix + t for t in texts] if prefix else texts
    truncate = params.get("truncate")
    truncate = True if truncate is None else truncate
    if not truncate:
        too_long = [len(loaded.counter.encode(t).ids) > loaded.max_tokens for t in texts] if loaded.counter else []
        if any(too_long):
            raise InvalidInput(f"input is longer than the model's {loaded.max_tokens} tokens and truncate is false")
    normalize = model_settings.normalize_of(task.normalize_override, layout, task.normalize)
    pooling = model_settings.pooling_of(task.pooling_override, layout, task.pooling)
    recipe = Recipe(
        modes=tuple(pooling.split("+")),
        normalize=normalize if params.get("normalize") is None else bool(params["normalize"]),
        prompt_length=sentence_head.prompt_length(pipe.tokenizer, prefix) if prefix and not layout.include_prompt
        else None,
        dense=loaded.dense,
    )
    direction = (params.get("truncation_direction") or "right").lower()
    # Set at load exactly where packing reproduces the model's outputs; adapter rows take the eager one (LoRA hooks).
    encoder = loaded.packed_encoder if rows is None else loaded.eager_encoder
    if encoder is not None:
        return _embed_packed(loaded, encoder, pipe, recipe, texts, direction, rows)
    # Sorted by length and run in micro-batches: each forward pads only to its own
    # longest input, where one padded forward would pad every input to the batch's longest.
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    results: list[Any] = [None] * len(texts)
    for start in range(0, len(order), MICRO_BATCH):
        compute_deadline.check()  # every client of the batch gone: skip the chunks left
        chunk = order[start:start + MICRO_BATCH]
        if rows is not None:  # the forward's rows are these inputs, sorted by length
            rows.for_inputs(chunk)
        outputs = _embed_chunk(loaded, pipe, recipe, [texts[i] for i in chunk], direction)
        for position, output in zip(chunk, outputs):
            results[position] = output
    return results


def _embed_packed(loaded: LoadedModel, encoder: PackedEncoder, pipe: Any, recipe: Recipe, texts: list[str],
                  direction: str, rows: BatchRows | None = None) -> list[Any]:
    """Every input in packed rows: compute goes to real tokens only."""
    counted = intake_tokens.reusable(texts) if direction == "right" else None  # a prompt made new strs
    if counted is not None:  # tokenized once, at intake, exactly as below (checked at load)
        ids: list[list[int]] = [t.ids for t in counted]
        types = None if counted[0].types is None else [t.types for t in counted]
    else:
        encoded = _tokenize(pipe.tokenizer, texts, direction, max_length=loaded.max_tokens)
        ids, types = encoded["input_ids"], encoded.get("token_type_ids")
    with cpu_threads_for(sum(len(x) for x in ids), pipe.model.device):
        return _pack_and_pool(loaded, encoder, pipe, recipe, ids, types, rows)


def _pack_and_pool(loaded: LoadedModel, encoder: PackedEncoder, pipe: Any, recipe: Recipe, ids: list[list[int]],
                   types: list[list[int]] | None, rows: BatchRows | None = None) -> list[Any]:
    """Packed forwards over token ids, then pooling per input.

    Mean and CLS pool in place as each forward ends; the other modes gather each input's tokens
    and pool them padded (sentence_head.pool), as sentence-transformers does.
    """
    model, tokenizer = pipe.model, pipe.tokenizer
    plain = recipe.plain
    pooled = torch.zeros(len(ids), model.config.hidden_size, device=model.device) if plain else None
    tokens: list[Any] = [None] * len(ids)
    forwards, per_row = packing_plan([len(x) for x in ids], encoder.row_tokens, rows)
    for forward in forwards:
        compute_deadline.check()  # every client of the batch gone: skip the forwards left
        inputs, owner = packed_inputs(forward, ids, types, loaded.pack_position_offset or 0,
                                      tokenizer.pad_token_id or 0, model.device, model.dtype)
        if rows is not None and per_row:  # rows of one adapter each: each row gathers its own A and B
            rows.for_inputs([members[0] for members in forward.rows])
        elif rows is not None:  # rows mix adapters: each position takes its own input's
            rows.for_tokens(owner.view(inputs["input_ids"].shape))
        hidden = encoder(inputs)
        if plain == "cls":
            for place in forward.placements():
                pooled[place.index] = hidden[place.row, place.start]
        elif plain == "mean":
            real = owner >= 0
            pooled.index_add_(0, owner[real], hidden.reshape(-1, hidden.shape[-1])[real].to(pooled.dtype))
        else:
            for place in forward.placements():
                tokens[place.index] = hidden[place.row, place.start:place.start + place.length]
    if recipe.tokens:
        return [_token_vectors(t, recipe.normalize) for t in tokens]
    if plain == "mean":
        counts = torch.tensor([len(x) for x in ids], dtype=pooled.dtype, device=pooled.device)
        pooled = pooled / counts.unsqueeze(1)
    elif plain is None:
        padded = torch.nn.utils.rnn.pad_sequence(tokens, batch_first=True)
        lengths = torch.tensor([len(t) for t in tokens], device=padded.device)
        mask = (torch.arange(padded.shape[1], device=padded.device).unsqueeze(0) < lengths.unsqueeze(1)).long()
        pooled = sentence_head.pool(padded, mask, recipe.modes, recipe.prompt_length)
    return _finished(pooled, recipe)


# How many more tokens rows of one adapter each may compute than rows that mix adapters, before mixing
# them (a per-position mask, every adapter's rank columns for every token) costs less.
ADAPTER_ROWS_SLACK = 1.15


def packing_plan(lengths: list[int], row_tokens: int,
                 rows: BatchRows | None) -> tuple[list[packing.PackedForward], bool]:
    """The packed forwards of a batch, and whether each row holds one adapter's inputs (batched_lora gathers per row).

    Rows of one adapter each pad more (a partly filled row per adapter); rows that mix them cost every
    adapter's rank columns at every token: the plan that computes fewer tokens, within ADAPTER_ROWS_SLACK.
    """
    plain = packing.plan_packing(lengths, row_tokens=row_tokens)
    if rows is None or len(set(rows.input_slots.tolist())) == 1:
        return plain, rows is not None
    grouped = packing.plan_packing(lengths, row_tokens=row_tokens, groups=rows.input_slots.tolist())
    computed = sum(f.computed_tokens for f in grouped)
    if computed <= ADAPTER_ROWS_SLACK * sum(f.computed_tokens for f in plain):
        return grouped, True
    return plain, False


def _embed_chunk(loaded: LoadedModel, pipe: Any, recipe: Recipe, texts: list[str], direction: str) -> list[Any]:
    encoded = _tokenize(pipe.tokenizer, texts, direction, max_length=loaded.max_tokens, padding=True,
                        return_tensors="pt")
    encoded = {k: v.to(pipe.model.device) for k, v in encoded.items()}
    with cpu_threads_for(int(encoded["attention_mask"].numel()), pipe.model.device):
        hidden = pipe.model(**encoded).last_hidden_state
    mask = encoded["attention_mask"]
    if recipe.tokens:
        # the real tokens of each row, wherever the padding side put them
        return [_token_vectors(row[m.bool()], recipe.normalize) for row, m in zip(hidden, mask)]
    return _finished(sentence_head.pool(hidden, mask, recipe.modes, recipe.prompt_length), recipe)


def _finished(pooled: Any, recipe: Recipe) -> list[Any]:
    """Pooled vectors through the Dense modules, then normalized where the recipe says."""
    if recipe.dense is not None:
        pooled = recipe.dense(pooled)
    return _pooled_vectors(pooled, recipe.normalize)


def _tokenize(tokenizer: Any, texts: list[str], direction: str, **options: Any) -> Any:
    """Tokenize with truncation from the requested side (restored afterwards)."""
    previous_side = tokenizer.truncation_side
    tokenizer.truncation_side = direction
    try:
        return tokenizer(texts, truncation=True, **options)
    finally:
        tokenizer.truncation_side = previous_side


def _token_vectors(tokens: Any, normalize: bool) -> list[Any]:
    """One input's token embeddings as [float32 bytes, shape]."""
    tokens = tokens.float()
    if normalize:
        tokens = torch.nn.functional.normalize(tokens, p=2, dim=-1)
    array = tokens.cpu().numpy().astype("<f4")
    return [array.tobytes(), list(array.shape)]


def _pooled_vectors(pooled: Any, normalize: bool) -> list[Any]:
    """One [float32 bytes, shape] per row of pooled vectors."""
    pooled = pooled.float()
    if normalize:
        pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
    array = pooled.cpu().numpy().astype("<f4")
    return [[row.tobytes(), [array.shape[1]]] for row in array]
