"""Loads models and runs batches: with task_runners and traced, the only modules that import torch and transformers.

Every method here blocks; the engine calls them from its own threads so the worker's
event loop keeps receiving, heart-beating and answering while a model computes.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from tokenizers import Tokenizer

from models_registry.api.errors import HostingError, Internal, InvalidInput
from models_registry.inference import packing, task_runners
from models_registry.registry.specs import ModelSpec, TaskSpec
from models_registry.worker.batcher import ItemFailure

logger = logging.getLogger(__name__)

# Forwards of fewer real tokens run on one CPU thread: measured on 2 cores with MiniLM, one
# to four sentences took 1.2-1.3x longer on two threads (waking the second thread for every
# small matrix costs more than it saves); from about eight sentences two threads win.
SMALL_FORWARD_TOKENS = 128
MICRO_BATCH = 16  # sentences per forward pass inside a worker batch (measured: 8-16 best on CPU)
DTYPES: dict[str, Any] = {"auto": "auto", "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class LoadedModel:
    """A model's pipelines (one per pipeline task kind; a ModelBundle where there is none) on one device."""

    spec: ModelSpec
    device: str
    pipelines: dict[str, Any] = field(default_factory=dict)
    counter: Tokenizer | None = None  # a private tokenizer copy for cost estimates
    max_tokens: int = 512
    # First position id of a packed input; None where packing did not reproduce the model's
    # own outputs at load (causal models, models that take no position ids...).
    pack_position_offset: int | None = None
    packed_encoder: Any = None  # inputs -> last hidden state for packed forwards (eager, or its TorchScript trace)

    def count_tokens(self, item: str | dict[str, str]) -> int:
        """Tokens an input becomes (capped at the model's length), for batch packing.

        A question-answering input costs the tokens of its question and context together.
        """
        if isinstance(item, dict):
            return min(sum(self.count_tokens(item[key]) for key in ("question", "context")), self.max_tokens)
        if self.counter is None:
            return max(1, len(item) // 4 + 2)
        return min(len(self.counter.encode(item).ids), self.max_tokens)


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

    def __init__(self, default_device: str = "cpu", torch_threads: int | None = None, packing: bool = True,
                 torchscript: bool = True) -> None:
        self.default_device = default_device
        self.packing = packing
        self.torchscript = torchscript
        if torch_threads:
            torch.set_num_threads(torch_threads)

    def load(self, spec: ModelSpec) -> LoadedModel:
        """Load every pipeline task kind the model's tasks use (blocking, may raise)."""
        device = resolve_device(spec.device or self.default_device)
        loaded = LoadedModel(spec=spec, device=device)
        for task in sorted({t.task for t in spec.tasks.values()}):
            loaded.pipelines[task] = task_runners.load(
                task, spec.source, revision=spec.revision or None, device=device, dtype=DTYPES.get(spec.dtype, "auto"),
            )
        first = next(iter(loaded.pipelines.values()), None)
        tokenizer = getattr(first, "tokenizer", None)
        if tokenizer is not None and hasattr(tokenizer, "backend_tokenizer"):
            counter = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
            counter.no_truncation()
            counter.no_padding()
            loaded.counter = counter
            limit = tokenizer.model_max_length
            loaded.max_tokens = limit if isinstance(limit, int) and 0 < limit < 100_000 else 512
        embedder = loaded.pipelines.get("feature-extraction")
        if embedder is not None and self.packing:
            loaded.pack_position_offset = packed_position_offset(embedder.model, embedder.tokenizer)
            logger.info("model %s: sequence packing %s", spec.name,
                        "on" if loaded.pack_position_offset is not None else "off (outputs differ; padded batches)")
            if loaded.pack_position_offset is not None:
                loaded.packed_encoder = eager_encoder(embedder.model)
                if self.torchscript and device == "cpu":
                    from models_registry.inference import trace

                    traced_encoder = trace.trace_packed_encoder(
                        embedder.model, embedder.tokenizer, loaded.pack_position_offset)
                    logger.info("model %s: TorchScript packed encoder %s", spec.name,
                                "on" if traced_encoder is not None else "off (eager)")
                    loaded.packed_encoder = traced_encoder or loaded.packed_encoder
        self._warm_up(loaded)
        return loaded

    def _warm_up(self, loaded: LoadedModel) -> None:
        """One tiny forward per embedding task: the first real request must not pay for it."""
        for task in loaded.spec.tasks.values():
            if task.task == "feature-extraction":
                try:
                    self.run(loaded, task, ["warm up"], [dict(task.parameters)])
                except Exception:  # a bad default parameter shows on the first request instead
                    logger.warning("warm-up of %s/%s failed", loaded.spec.name, task.name)

    def run(
        self, loaded: LoadedModel, task: TaskSpec, texts: Sequence[Any], parameters: Sequence[dict[str, Any]]
    ) -> list[Any]:
        """Outputs for each input (a string, or a question/context object) or ItemFailure, in input order.

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

    def _run_group(self, loaded: LoadedModel, task: TaskSpec, texts: list[Any], params: dict[str, Any]) -> list[Any]:
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

    def _compute(self, loaded: LoadedModel, task: TaskSpec, texts: list[Any], params: dict[str, Any]) -> list[Any]:
        pipe = loaded.pipelines[task.task]
        with torch.inference_mode():
            if task.task == "feature-extraction":
                return self._embed(loaded, pipe, task, texts, params)
            run = task_runners.RUNNERS.get(task.task)
            if run is not None:
                return run(pipe, texts, params)
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
        normalize = task.normalize if params.get("normalize") is None else params["normalize"]
        direction = (params.get("truncation_direction") or "right").lower()
        if loaded.pack_position_offset is not None:
            return self._embed_packed(loaded, pipe, task, texts, direction, normalize)
        # Sorted by length and run in micro-batches: each forward pads only to its own
        # longest input (padding was the biggest waste in mixed-length batches).
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        results: list[Any] = [None] * len(texts)
        for start in range(0, len(order), MICRO_BATCH):
            chunk = order[start:start + MICRO_BATCH]
            outputs = self._embed_chunk(loaded, pipe, task, [texts[i] for i in chunk], direction, normalize)
            for position, output in zip(chunk, outputs):
                results[position] = output
        return results

    def _embed_packed(self, loaded: LoadedModel, pipe: Any, task: TaskSpec, texts: list[str], direction: str,
                      normalize: bool) -> list[Any]:
        """Every input in packed rows: compute goes to real tokens only."""
        encoded = _tokenize(pipe.tokenizer, texts, direction, max_length=loaded.max_tokens)
        ids = encoded["input_ids"]
        with cpu_threads_for(sum(len(x) for x in ids), pipe.model.device):
            return self._pack_and_pool(loaded, pipe, task, ids, encoded.get("token_type_ids"), normalize)

    def _pack_and_pool(self, loaded: LoadedModel, pipe: Any, task: TaskSpec, ids: list[list[int]],
                       types: list[list[int]] | None, normalize: bool) -> list[Any]:
        """Packed forwards over token ids, then pooling per input."""
        model, tokenizer = pipe.model, pipe.tokenizer
        pooled = None if task.pooling == "none" else torch.zeros(len(ids), model.config.hidden_size, device=model.device)
        tokens: list[Any] = [None] * len(ids)
        for forward in packing.plan_packing([len(x) for x in ids]):
            inputs, owner = packed_inputs(forward, ids, types, loaded.pack_position_offset or 0,
                                          tokenizer.pad_token_id or 0, model.device, model.dtype)
            hidden = loaded.packed_encoder(inputs)
            if task.pooling == "none":
                for place in forward.placements():
                    tokens[place.index] = hidden[place.row, place.start:place.start + place.length]
            elif task.pooling == "cls":
                for place in forward.placements():
                    pooled[place.index] = hidden[place.row, place.start]
            else:
                real = owner >= 0
                pooled.index_add_(0, owner[real], hidden.reshape(-1, hidden.shape[-1])[real].to(pooled.dtype))
        if task.pooling == "none":
            return [_token_vectors(t, normalize) for t in tokens]
        if task.pooling != "cls":
            counts = torch.tensor([len(x) for x in ids], dtype=pooled.dtype, device=pooled.device)
            pooled = pooled / counts.unsqueeze(1)
        return _pooled_vectors(pooled, normalize)

    def _embed_chunk(self, loaded: LoadedModel, pipe: Any, task: TaskSpec, texts: list[str], direction: str,
                     normalize: bool) -> list[Any]:
        encoded = _tokenize(pipe.tokenizer, texts, direction, max_length=loaded.max_tokens, padding=True,
                            return_tensors="pt")
        encoded = {k: v.to(pipe.model.device) for k, v in encoded.items()}
        with cpu_threads_for(int(encoded["attention_mask"].numel()), pipe.model.device):
            hidden = pipe.model(**encoded).last_hidden_state
        mask = encoded["attention_mask"]
        if task.pooling == "none":
            return [_token_vectors(row[:length], normalize) for row, length in zip(hidden, mask.sum(dim=1).tolist())]
        if task.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
        return _pooled_vectors(pooled, normalize)


def _tokenize(tokenizer: Any, texts: list[str], direction: str, **options: Any) -> Any:
    """Tokenize with truncation from the requested side (restored afterwards)."""
    previous_side = tokenizer.truncation_side
    tokenizer.truncation_side = direction
    try:
        return tokenizer(texts, truncation=True, **options)
    finally:
        tokenizer.truncation_side = previous_side


@contextmanager
def cpu_threads_for(tokens: int, device: Any) -> Iterator[None]:
    """One torch thread for a small CPU forward, the configured number otherwise."""
    threads = torch.get_num_threads()
    if tokens >= SMALL_FORWARD_TOKENS or threads <= 1 or getattr(device, "type", device) != "cpu":
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


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


def packed_inputs(forward: packing.PackedForward, ids: Sequence[Sequence[int]], types: Sequence[Sequence[int]] | None,
                  position_offset: int, pad_id: int, device: Any, dtype: Any) -> tuple[dict[str, Any], Any]:
    """The tensors of one packed forward, and the owner input index of every flat position (-1: padding).

    A block-diagonal additive mask keeps packed inputs apart; padding positions attend
    only to themselves (no empty softmax rows); position ids restart at every input.
    """
    width = forward.width
    input_ids: list[int] = []
    positions: list[int] = []
    token_types: list[int] = []
    owner: list[int] = []
    for members in forward.rows:
        for index in members:
            input_ids.extend(ids[index])
            positions.extend(range(position_offset, position_offset + len(ids[index])))
            if types is not None:
                token_types.extend(types[index])
            owner.extend([index] * len(ids[index]))
        padding = width - sum(len(ids[i]) for i in members)
        input_ids.extend([pad_id] * padding)
        positions.extend([position_offset] * padding)
        token_types.extend([0] * padding if types is not None else ())
        owner.extend([-1] * padding)
    shape = (len(forward.rows), width)
    owner_t = torch.tensor(owner, device=device)
    # Padding gets a segment of its own per position: it sees only itself.
    segment = torch.where(owner_t >= 0, owner_t, -1 - torch.arange(len(owner), device=device)).view(shape)
    allowed = (segment.unsqueeze(2) == segment.unsqueeze(1)).unsqueeze(1)
    dtype = dtype if dtype.is_floating_point else torch.float32
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(~allowed, torch.finfo(dtype).min)
    inputs = {"input_ids": torch.tensor(input_ids, device=device).view(shape),
              "position_ids": torch.tensor(positions, device=device).view(shape), "attention_mask": mask}
    if types is not None:
        inputs["token_type_ids"] = torch.tensor(token_types, device=device).view(shape)
    return inputs, owner_t


def eager_encoder(model: Any) -> Any:
    """The model's own forward as an encoder: inputs -> last hidden state."""
    return lambda inputs: model(**inputs).last_hidden_state


def relative_error(got: Any, want: Any) -> float:
    """Largest absolute difference over the largest activation of want."""
    got, want = got.float(), want.float()
    return float((got - want).abs().max() / want.abs().max().clamp(min=1e-6))


def output_tolerance(dtype: Any) -> float:
    """How far a rearranged forward (packed, traced) may stray from the model's own outputs."""
    return 2e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-4


PACKING_CHECK_TEXTS = ("Hello there.", "A somewhat longer sentence, to check that packed inputs stay apart.", "ok")


def packed_position_offset(model: Any, tokenizer: Any) -> int | None:
    """The position offset under which packed forwards reproduce the model's own outputs; None if none does.

    Checked on real inputs at load: a model that takes no position ids, derives them
    differently, or is causal fails the comparison and keeps padded batches.
    """
    if "position_ids" not in inspect.signature(model.forward).parameters:
        return None
    encoded = tokenizer(list(PACKING_CHECK_TEXTS), truncation=True)
    ids, types = encoded["input_ids"], encoded.get("token_type_ids")
    pad = getattr(model.config, "pad_token_id", None)
    candidates = [0] + ([pad + 1] if isinstance(pad, int) and pad + 1 != 0 else [])
    (forward,) = packing.plan_packing([len(x) for x in ids], row_tokens=sum(len(x) for x in ids))  # one row
    encoder = eager_encoder(model)
    with torch.inference_mode():
        expected = []
        for position, row in enumerate(ids):
            single = {"input_ids": torch.tensor([row], device=model.device)}
            if types is not None:
                single["token_type_ids"] = torch.tensor([types[position]], device=model.device)
            expected.append(model(**single).last_hidden_state[0])
        for offset in candidates:
            try:
                hidden = encoder(packed_inputs(forward, ids, types, offset, tokenizer.pad_token_id or 0,
                                               model.device, model.dtype)[0])
            except Exception as error:  # the model refuses a 4D mask or position ids
                logger.info("packed forward not possible: %s: %s", type(error).__name__, error)
                return None
            worst = max(relative_error(hidden[p.row, p.start:p.start + p.length], expected[p.index])
                        for p in forward.placements())
            if worst <= output_tolerance(model.dtype):
                return offset
            logger.info("packed forward with position offset %d differs by %.2g (relative)", offset, worst)
    return None
