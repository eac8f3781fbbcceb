"""ColBERT-style (multi-vector) models: token vectors per query or document, and MaxSim scores for /rerank.

What sentence-transformers 6.2's MultiVectorEncoder computes (read from its source): the side's prompt
("[Q] ", "[D] ") before the text, truncation at the side's length, a query padded with the expansion token up
to the expansion length (attended to or not; scored either way), the Transformer, the Dense projection of
every token, Normalize, then the tokens the MultiVectorMask keeps (documents lose their skiplist tokens).
MaxSim sums, over the query's vectors, the best dot product with any of the text's. Rerank pairs are scored
here, in the worker, so the vectors never cross the broker: one query is encoded once per batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from models_registry.catalog import model_settings
from models_registry.core import model_layout, multi_vector_settings
from models_registry.core.errors import InvalidInput
from models_registry.core.multi_vector_settings import MultiVectorSettings
from models_registry.inference import compute_deadline
from models_registry.inference.sentence_head import DenseHead
from models_registry.inference.task_common import cpu_threads_for
from models_registry.catalog.specs import TaskSpec

MICRO_BATCH = 16  # inputs per padded forward, sorted by length (as embeddings' padded path)


@dataclass
class MultiVectorModel:
    """A loaded model's settings resolved against its tokenizer: the token ids its mask and expansion use."""

    settings: MultiVectorSettings
    dense: DenseHead | None
    skip_ids: frozenset[int]  # token ids left out on the settings' skiplist sides
    expansion_id: int | None


@dataclass(frozen=True)
class Side:
    """How one side (query or document) of a request is encoded."""

    role: str  # "query" or "document"
    prefix: str
    normalize: bool
    truncate: bool = True
    direction: str = "right"


def prepare(layout: model_layout.ModelLayout, tokenizer: Any, dense: DenseHead | None) -> MultiVectorModel:
    """The model's settings (raises ValueError where they are not computed) with the tokenizer set as ST sets it."""
    settings = multi_vector_settings.read(layout.kind, layout.multi_vector or {})
    register_prefixes(tokenizer, settings.prefixes)
    return MultiVectorModel(settings=settings, dense=dense, skip_ids=_skip_ids(tokenizer, settings.skiplist_words),
                            expansion_id=_expansion_id(tokenizer, settings))


def register_prefixes(tokenizer: Any, prefixes: tuple[str, ...]) -> None:
    """A legacy prefix the vocabulary knows becomes one special token, as MultiVectorEncoder registers it.

    PyLate inserted `[Q] ` (Stanford's ColBERT `[unused0]`) as one token id; prepended as text, the tokenizer
    would split or lower-case it unless it is a non-normalized special token.
    """
    from transformers import AddedToken

    added, vocabulary = set(getattr(tokenizer, "added_tokens_encoder", None) or {}), tokenizer.get_vocab()
    wanted = []
    for value in prefixes:
        for prefix in (value, value.split(None, 1)[0]):
            if prefix not in added and prefix not in vocabulary:
                continue
            if tokenizer.tokenize(prefix) != [prefix]:
                wanted.append(AddedToken(prefix, normalized=False, special=True))
            break
    if wanted:
        tokenizer.add_special_tokens({"additional_special_tokens": wanted})


def _skip_ids(tokenizer: Any, words: tuple[str, ...]) -> frozenset[int]:
    """The skiplist's token ids; a word the vocabulary lacks is dropped (it would skip every [UNK] otherwise)."""
    unk = getattr(tokenizer, "unk_token_id", None)
    found = {word: tokenizer.convert_tokens_to_ids(word) for word in words}
    return frozenset(i for word, i in found.items() if unk is None or i != unk or word == tokenizer.unk_token)


def _expansion_id(tokenizer: Any, settings: MultiVectorSettings) -> int | None:
    expansion = settings.expansion
    if expansion is None:
        return None
    if expansion.token is None:  # PyLate's chain: [MASK] for encoders, EOS for decoders
        found = tokenizer.mask_token_id if tokenizer.mask_token_id is not None else tokenizer.eos_token_id
        if found is None:
            raise ValueError("query_expansion needs a token: this tokenizer has neither a mask nor an EOS token")
        return found
    found = tokenizer.convert_tokens_to_ids(expansion.token)
    if found is None or (found == tokenizer.unk_token_id and expansion.token != tokenizer.unk_token):
        raise ValueError(f"query_expansion token {expansion.token!r} is not in this tokenizer's vocabulary")
    return found


def run(model: MultiVectorModel, layout: model_layout.ModelLayout, pipe: Any, task: TaskSpec, items: list[Any],
        params: dict[str, Any]) -> list[Any]:
    """Token vectors ([float32 bytes, shape]) for each text, a MaxSim score for each {"query", "text"} pair."""
    params = model_settings.with_prompts(layout, params)
    prompts = params.get("prompts") or {}
    normalize = model_settings.normalize_of(task.normalize_override, layout, task.normalize)
    normalize = normalize if params.get("normalize") is None else bool(params["normalize"])
    options = {"normalize": normalize, "truncate": params.get("truncate") is not False,
               "direction": (params.get("truncation_direction") or "right").lower()}
    results: list[Any] = [None] * len(items)
    texts = [i for i, item in enumerate(items) if not isinstance(item, dict)]
    if texts:
        side = Side(*_side(params, prompts), **options)
        for position, vectors in zip(texts, encode(model, pipe, [str(items[i]) for i in texts], side)):
            array = vectors.numpy().astype("<f4")
            results[position] = [array.tobytes(), list(array.shape)]
    pairs = [i for i, item in enumerate(items) if isinstance(item, dict)]
    if pairs:
        queries = list(dict.fromkeys(items[i]["query"] for i in pairs))
        encoded = encode(model, pipe, queries, Side("query", prompts.get("query") or "", **options))
        query_vectors = dict(zip(queries, encoded))
        documents = encode(model, pipe, [items[i]["text"] for i in pairs],
                           Side("document", prompts.get("document") or "", **options))
        for position, document in zip(pairs, documents):
            results[position] = maxsim(query_vectors[items[position]["query"]], document, model.settings.similarity)
    return results


def _side(params: dict[str, Any], prompts: dict[str, str]) -> tuple[str, str]:
    """The role and prefix a text request names: prompt_name query is the query side, any other the document's."""
    name = params.get("prompt_name")
    if name is None:
        return "document", params.get("prompt") or prompts.get("document") or ""
    if name not in prompts:
        raise InvalidInput(f"prompt_name {name!r} is not defined for this task; "
                           f"defined: {', '.join(sorted(prompts)) or 'none'}")
    return ("query" if name == "query" else "document"), prompts[name]


def maxsim(query: torch.Tensor, document: torch.Tensor, similarity: str = "maxsim") -> float:
    """Sum over the query's vectors of the best dot product with the document's (meanmaxsim: divided by their count)."""
    score = (query @ document.T).max(dim=1).values.sum()
    return float(score / len(query) if similarity == "meanmaxsim" else score)


def encode(model: MultiVectorModel, pipe: Any, texts: list[str], side: Side) -> list[torch.Tensor]:
    """Each text's kept token vectors, float32 on the CPU, in input order."""
    rows = _rows(model, pipe.tokenizer, [side.prefix + text for text in texts], side)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
    results: list[Any] = [None] * len(rows)
    for start in range(0, len(order), MICRO_BATCH):
        compute_deadline.check()  # every client of the batch gone: skip the chunks left
        chunk = order[start:start + MICRO_BATCH]
        for position, vectors in zip(chunk, _forward(model, pipe, [rows[i] for i in chunk], side.normalize)):
            results[position] = vectors
    return results


Row = tuple[list[int], list[int], list[int], list[bool]]  # ids, token types, attention, kept for scoring


def _rows(model: MultiVectorModel, tokenizer: Any, texts: list[str], side: Side) -> list[Row]:
    """Token ids as MultiVectorEncoder's preprocess and MultiVectorMask leave them, per text."""
    settings, expansion = model.settings, model.settings.expansion if side.role == "query" else None
    limit = settings.query_length if side.role == "query" else settings.document_length
    if expansion is not None:  # fixed: exactly the expansion length; min: at least it
        limit = expansion.length if expansion.strategy == "fixed" else (limit and max(limit, expansion.length))
    if not side.truncate:
        longest = max(len(ids) for ids in tokenizer(texts)["input_ids"])
        cap = limit or tokenizer.model_max_length
        if longest > cap:
            raise InvalidInput(f"an input has {longest} tokens, over this model's {cap} for a {side.role}, "
                               "and truncate is false")
    previous, tokenizer.truncation_side = tokenizer.truncation_side, side.direction
    try:
        encoded = tokenizer(texts, truncation=True, max_length=limit)
    finally:
        tokenizer.truncation_side = previous
    skip = settings.masked and side.role in settings.skiplist_tasks
    keep = set(settings.keep_only_token_ids) if settings.masked and settings.keep_only_token_ids and (
        side.role != "query") else None
    rows: list[Row] = []
    for index, ids in enumerate(encoded["input_ids"]):
        types = list(encoded["token_type_ids"][index]) if "token_type_ids" in encoded else []
        added = max(0, expansion.length - len(ids)) if expansion is not None else 0
        attend = expansion is not None and expansion.attend
        attention = [1] * len(ids) + [int(attend)] * added
        scored = [True] * len(ids) + [settings.masked or attend] * added  # the mask scores expansions anyway
        ids = list(ids) + [model.expansion_id] * added
        types = types + [0] * added if types else types
        scored = [s and (not skip or i not in model.skip_ids) and (keep is None or i in keep)
                  for s, i in zip(scored, ids)]
        rows.append((ids, types, attention, scored))
    return rows


def _forward(model: MultiVectorModel, pipe: Any, rows: list[Row], normalize: bool) -> list[torch.Tensor]:
    """One padded forward over rows, then the projection, normalization and the kept tokens of each row."""
    width, pad = max(len(r[0]) for r in rows), pipe.tokenizer.pad_token_id or 0
    device = pipe.model.device

    def padded(values: list[list[Any]], fill: Any, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor([list(v) + [fill] * (width - len(v)) for v in values], dtype=dtype, device=device)

    inputs = {"input_ids": padded([r[0] for r in rows], pad, torch.long),
              "attention_mask": padded([r[2] for r in rows], 0, torch.long)}
    if rows[0][1]:
        inputs["token_type_ids"] = padded([r[1] for r in rows], 0, torch.long)
    kept = padded([r[3] for r in rows], False, torch.bool)
    with cpu_threads_for(int(inputs["input_ids"].numel()), device):
        hidden = pipe.model(**inputs).last_hidden_state
        if model.dense is not None:
            hidden = model.dense(hidden)
        hidden = hidden.float()
        if normalize:
            hidden = torch.nn.functional.normalize(hidden, p=2, dim=-1)
    return [row[mask].cpu() for row, mask in zip(hidden, kept)]
