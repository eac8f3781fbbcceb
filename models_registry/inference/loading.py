"""Loading a model: one pipeline (or ModelBundle) per task kind, its token counter, the packing check and the trace.

Every function here blocks; the engine calls them from its loader thread.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch
from tokenizers import Tokenizer
from transformers import (
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    pipeline,
)

from models_registry.core import model_files, model_layout
from models_registry.inference import (
    cpu_packing,
    generation_check,
    half_precision,
    intake_tokens,
    media_models,
    multi_vector,
    onnx_backend,
    onnx_logits,
    ranking,
    sentence_head,
    trace,
)
from models_registry.inference.backend import PackedEncoder
from models_registry.inference.decoder_ranking import DecoderRanker
from models_registry.inference.packed_forward import EagerEncoder, packed_position_offset
from models_registry.inference.task_common import ModelBundle, max_positions
from models_registry.media.item import is_media
from models_registry.catalog import sparse_answer
from models_registry.catalog.compute_cost import DEFAULT_MAX_NEW_TOKENS, TokenCounter
from models_registry.catalog.specs import ModelSpec

logger = logging.getLogger(__name__)

# int8 is an ONNX Runtime copy of the float32 model: torch loads float32 for it.
DTYPES: dict[str, Any] = {"auto": "auto", "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
                          "int8": torch.float32}
# Task kinds transformers 5 has no pipeline for: a model class and its tokenizer instead (and text-ranking,
# whose model class the directory's files say: ranking.load_ranker).
BUNDLE_CLASSES: dict[str, Any] = {
    "question-answering": AutoModelForQuestionAnswering,
    **dict.fromkeys(("summarization", "translation", "text2text-generation"), AutoModelForSeq2SeqLM),
}


@dataclass
class LoadedModel:
    """A model's pipelines (one per pipeline task kind; a ModelBundle where there is none) on one device."""

    spec: ModelSpec
    device: str
    pipelines: dict[str, Any] = field(default_factory=dict)
    counter: Tokenizer | None = None  # a private tokenizer copy for cost estimates
    max_tokens: int = 512
    positions: int | None = None  # the most tokens its model takes (task_common.max_positions), where it says
    # First position id of a packed input; None where packing did not reproduce the model's
    # own outputs at load (causal models, models that take no position ids...).
    pack_position_offset: int | None = None
    packed_encoder: PackedEncoder | None = None  # packed forwards: eager, its trace, or ONNX Runtime
    backend: dict[str, Any] = field(default_factory=lambda: {"backend": "torch"})  # what the heartbeat reports
    media_costs: media_models.MediaCosts = field(default_factory=media_models.MediaCosts)
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS  # the model's own default generation length
    # A truncating tokenizer copy whose ids equal the forward's (checked at load) and whether
    # token types go to the model: intake encodes each text once with it (intake_tokens).
    intake: tuple[Tokenizer, bool] | None = None
    recent_prompts: intake_tokens.RecentTexts = field(default_factory=intake_tokens.RecentTexts)
    # What the model directory's files say (read at this load) and the Dense modules they name.
    layout: model_layout.ModelLayout = field(default_factory=model_layout.ModelLayout)
    dense: sentence_head.DenseHead | None = None
    multi_vector: multi_vector.MultiVectorModel | None = None  # a ColBERT-style model: token vectors, MaxSim
    # The packed encoder a batch with adapter rows runs: the model's own eager forward, whose Linear layers take
    # the LoRA hooks, beside packed_encoder (a trace or ONNX Runtime runs a fixed graph: base rows only).
    eager_encoder: PackedEncoder | None = None
    adapter_caches: dict[str, Any] = field(default_factory=dict)  # task kind -> inference.adapter_cache.AdapterCache

    @property
    def sparse(self) -> bool:
        """Whether its feature-extraction is a SPLADE model's: an MLM head's vocabulary-wide vectors."""
        return sparse_answer.is_sparse(self.layout)

    @property
    def sparse_width(self) -> int | None:
        """A sparse model's vector width (its vocabulary); None for a dense one."""
        embedder = self.pipelines.get("feature-extraction")
        return int(embedder.model.config.vocab_size) if self.sparse and embedder is not None else None

    def cost_counter(self) -> TokenCounter:
        """This model's tokenizer and lengths, for what a request makes it compute (catalog.compute_cost)."""
        counter = self.counter
        if counter is None:
            return TokenCounter(lambda text: max(1, len(text) // 4 + 2), self.max_tokens, self.max_new_tokens)
        return TokenCounter(lambda text: len(counter.encode(text).ids), self.max_tokens, self.max_new_tokens)

    def count_tokens(self, item: str | dict[str, str]) -> int:
        """Tokens an input becomes (capped at the model's length), for batch packing.

        A pair (question and context, query and text) costs the tokens of both together;
        an image its patch tokens, a clip its encoder frames (media_models.item_cost).
        """
        if is_media(item):
            return media_models.item_cost(self.media_costs, item["media"], float(item.get("seconds") or 0.0))
        if isinstance(item, dict):
            return min(sum(self.count_tokens(text) for text in item.values()), self.max_tokens)
        if self.counter is None:
            return max(1, len(item) // 4 + 2)
        return min(len(self.counter.encode(item).ids), self.max_tokens)

    def count_inputs(self, task: str, inputs: list[Any]) -> tuple[list[Any], list[int]]:
        """The inputs as the batch carries them, and each one's tokens (count_tokens).

        Plain texts are encoded in one batch call; a feature-extraction request's texts keep
        their ids (intake_tokens.TokenizedText) so the forward does not tokenize them again, and so
        do text-generation prompts shorter than the intake's truncation (the n choices of a prompt,
        n requests, are encoded once).
        """
        if self.intake is not None and inputs and all(type(item) is str for item in inputs):
            if task == "text-generation":
                encoded = self.recent_prompts.encode(*self.intake, inputs)
                kept = [item if len(item.ids) < self.max_tokens else str(item) for item in encoded]
                return kept, [len(item.ids) for item in encoded]
            encoded = intake_tokens.encode(*self.intake, inputs)
            return (encoded if task == "feature-extraction" else inputs), [len(item.ids) for item in encoded]
        return inputs, [self.count_tokens(item) for item in inputs]


def resolve_device(requested: str) -> str:
    """The torch device to use; falls back to cpu when the accelerator is absent."""
    if requested.startswith("cuda") and not torch.cuda.is_available():
        logger.warning("device %s requested but CUDA is not available: using cpu", requested)
        return "cpu"
    if requested == "mps" and not torch.backends.mps.is_available():
        logger.warning("device mps requested but not available: using cpu")
        return "cpu"
    return requested


def load_pipeline(task: str, source: str, revision: str | None, device: str, dtype: Any, sparse: bool = False) -> Any:
    """A ready pipeline (or ModelBundle, or DecoderRanker) for one task kind of a model (blocking, may raise).

    sparse: a SPLADE model's feature-extraction, whose vectors come from the MLM head that the
    feature-extraction pipeline (AutoModel) would drop.
    """
    if task == "text-ranking":
        return ranking.load_ranker(source, revision, device, dtype)
    if task in BUNDLE_CLASSES or sparse:
        tokenizer = AutoTokenizer.from_pretrained(source, revision=revision)
        if task == "question-answering" and not tokenizer.is_fast:
            raise ValueError("question-answering needs a fast tokenizer (tokenizer.json) for answer offsets")
        model_class = AutoModelForMaskedLM if sparse else BUNDLE_CLASSES[task]
        model = model_class.from_pretrained(source, revision=revision, dtype=dtype).to(device).eval()
        return ModelBundle(model=model, tokenizer=tokenizer)
    pipe = pipeline(task, model=source, revision=revision, device=device, dtype=dtype)
    pipe.model.eval()
    if task == "text-generation" and pipe.tokenizer is not None:
        # Batched prompts of a decoder-only model must be padded on the left.
        pipe.tokenizer.padding_side = "left"
        if pipe.tokenizer.pad_token is None:
            pipe.tokenizer.pad_token = pipe.tokenizer.eos_token
    return pipe


def load_model(spec: ModelSpec, default_device: str, packing: bool, torchscript: bool,
               ort: onnx_backend.OrtSettings | None = None, half_dtypes: tuple[str, ...] | None = None) -> LoadedModel:
    """Load every pipeline task kind the model's tasks use, and prepare packed embeddings (blocking, may raise).

    half_dtypes: what dtype auto tries (None: half_precision's defaults, float16 and bfloat16 on CUDA only).
    """
    device = resolve_device(spec.device or default_device)
    loaded = LoadedModel(spec=spec, device=device)
    shared: dict[str, Any] = {}  # one loaded copy of a CLIP-style model for its text and image tasks
    for task in sorted({t.task for t in spec.tasks.values()}):
        if media_models.serves(task, spec.source, spec.revision or None):
            loaded.pipelines[task] = media_models.load(task, spec.source, spec.revision or None, device,
                                                       DTYPES.get(spec.dtype, "auto"), shared)
            continue
        if task == "feature-extraction":  # the files decide what is loaded: a SPLADE model keeps its MLM head
            loaded.layout = model_layout.parse_layout(model_files.file_reader(spec.source, spec.revision or None))
        loaded.pipelines[task] = load_pipeline(
            task, spec.source, revision=spec.revision or None, device=device, dtype=DTYPES.get(spec.dtype, "auto"),
            sparse=task == "feature-extraction" and loaded.sparse,
        )
    loaded.media_costs = media_models.costs(loaded.pipelines)
    embedder = loaded.pipelines.get("feature-extraction")
    if embedder is not None and not isinstance(embedder, media_models.DualEncoder):
        _read_files(loaded, embedder)
    # Before the packing check and the trace: they must see the dtype the model serves in. A sparse
    # model's vectors have no half-precision probe (half_precision compares dense ones): it keeps its dtype.
    probed = {kind: p for kind, p in loaded.pipelines.items() if not (kind == "feature-extraction" and loaded.sparse)}
    chosen = None
    if spec.dtype == "auto" and probed:
        chosen = half_precision.choose(probed, device, half_dtypes)
    elif spec.dtype == "auto" and embedder is not None:  # a sparse model alone
        chosen = half_precision.DtypeChoice(str(embedder.model.dtype).removeprefix("torch."),
                                            "auto: the checkpoint's dtype (no half-precision probe for sparse vectors)")
    if "text-generation" in loaded.pipelines:  # in the dtype it serves in: decoded in slots, or in static batches
        cpu_packing.pack(loaded.pipelines["text-generation"].model)
        generation_check.verify(loaded.pipelines["text-generation"])
    first = next(iter(loaded.pipelines.values()), None)
    tokenizer = getattr(first, "tokenizer", None)
    if tokenizer is not None and hasattr(tokenizer, "backend_tokenizer"):
        counter = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
        counter.no_truncation()
        counter.no_padding()
        loaded.counter = counter
        limit = tokenizer.model_max_length
        loaded.max_tokens = limit if isinstance(limit, int) and 0 < limit < 100_000 else 512
        loaded.intake = intake_tokens.intake_tokenizer(tokenizer, loaded.max_tokens)
        if getattr(first, "model", None) is not None:
            loaded.positions = max_positions(first.model, tokenizer)
    generation_config = getattr(getattr(first, "model", None), "generation_config", None)
    if isinstance(getattr(generation_config, "max_new_tokens", None), int):
        loaded.max_new_tokens = generation_config.max_new_tokens
    _logits_on_onnxruntime(loaded, ort)
    if isinstance(embedder, media_models.DualEncoder):
        pass  # CLIP's text tower projects its pooled output: no packed token embeddings
    elif embedder is not None and packing and loaded.multi_vector is None and not loaded.sparse:
        # (a multi-vector query needs its padding positions; packed forwards give no MLM logits)
        _prepare_packing(loaded, embedder, torchscript and device == "cpu", ort)
    elif spec.dtype == "int8":
        raise ValueError("dtype int8 serves packed embeddings only: it needs a feature-extraction task of a "
                         "dense single-vector model and sequence packing on (HOSTING_SEQUENCE_PACKING)")
    if loaded.sparse and spec.backend == "onnxruntime":  # asked for, never silently not given
        raise ValueError("backend onnxruntime runs dense embeddings only; a sparse (SPLADE) model runs on torch: "
                         "register it with --backend auto or torch")
    if chosen is not None:
        loaded.backend = {**loaded.backend, **chosen.as_state()}
    return loaded


def _read_files(loaded: LoadedModel, embedder: Any) -> None:
    """What the model's files say (loaded.layout), applied to its tokenizer (length, lower case) and its Dense modules.

    Before the token counter and the intake copy are made from the tokenizer: they must tokenize alike.
    """
    spec, layout = loaded.spec, loaded.layout
    tokenizer, config = embedder.tokenizer, embedder.model.config
    if layout.max_seq_length is not None:
        tokenizer.model_max_length = layout.max_seq_length
    elif layout.kind and getattr(config, "max_position_embeddings", -1) not in (None, -1):
        # sentence-transformers caps the tokenizer's length at the model's positions
        tokenizer.model_max_length = min(tokenizer.model_max_length, config.max_position_embeddings)
    if layout.do_lower_case and tokenizer.is_fast:
        from tokenizers import normalizers

        current = tokenizer.backend_tokenizer.normalizer  # lowercasing twice is lowercasing once
        parts = [normalizers.Lowercase()] + ([current] if current is not None else [])
        tokenizer.backend_tokenizer.normalizer = normalizers.Sequence(parts)
    if layout.padding_side is not None:
        tokenizer.padding_side = layout.padding_side
    if layout.dense:
        loaded.dense = sentence_head.load_dense(spec.source, spec.revision or None, layout.dense,
                                                embedder.model.device, embedder.model.dtype)
    if layout.multi_vector is not None:
        _check_multi_vector(spec)
        loaded.multi_vector = multi_vector.prepare(layout, tokenizer, loaded.dense)
    elif "HF_ColBERT" in (getattr(config, "architectures", None) or []):
        raise ValueError("a Stanford-NLP ColBERT checkpoint (HF_ColBERT, no modules.json) is not served here; save it "
                         "with sentence-transformers' MultiVectorEncoder (or PyLate) and register that directory")


def _check_multi_vector(spec: ModelSpec) -> None:
    """A multi-vector model answers token vectors: a pooling set by the operator would be something else."""
    for task in spec.tasks.values():
        if task.task == "feature-extraction" and task.pooling_override not in ("", "none"):
            raise ValueError(f"task {task.name}: {spec.source} is a multi-vector (ColBERT-style) model, whose answer "
                             f"is one vector per token; pooling {task.pooling_override!r} is not computed for it")


def _logits_on_onnxruntime(loaded: LoadedModel, ort: onnx_backend.OrtSettings | None) -> None:
    """Classification, token classification, fill-mask and ranking forwards on ONNX Runtime where they match torch."""
    # (A decoder reranker stays on torch: its exported forward would give every token's logits over the vocabulary.)
    chosen = {task: onnx_logits.use_onnxruntime(loaded.spec, task, loaded.device, runner.model, runner.tokenizer, ort)
              for task, runner in loaded.pipelines.items()
              if task in onnx_logits.LOGITS_TASKS and not isinstance(runner, DecoderRanker)}
    if chosen:
        on_ort = all(backend == "onnxruntime" for backend in chosen.values())
        loaded.backend = {"backend": "onnxruntime" if on_ort else "torch", "task_backends": chosen}


def _prepare_packing(loaded: LoadedModel, embedder: Any, torchscript: bool, ort: onnx_backend.OrtSettings | None) -> None:
    """Packed embeddings where they reproduce the model's own outputs: on ONNX Runtime, else traced, else eager."""
    name = loaded.spec.name
    loaded.pack_position_offset = packed_position_offset(embedder.model, embedder.tokenizer)
    logger.info("model %s: sequence packing %s", name,
                "on" if loaded.pack_position_offset is not None else "off (outputs differ; padded batches)")
    if loaded.pack_position_offset is not None:  # adapter rows run eager whatever base rows run: no reload for one
        loaded.eager_encoder = EagerEncoder(embedder.model)
    encoder, report = onnx_backend.choose_encoder(loaded.spec, loaded.device, embedder, loaded.pack_position_offset, ort)
    loaded.backend = {**loaded.backend, **report.as_state()}  # the embeddings' backend is the model's headline
    logger.info("model %s: packed embeddings on %s%s", name, report.backend, f" ({report.reason})" if report.reason else "")
    if encoder is not None:
        loaded.packed_encoder = encoder
        return
    if loaded.pack_position_offset is None:
        return
    loaded.packed_encoder = loaded.eager_encoder
    if torchscript:
        traced_encoder = trace.trace_packed_encoder(embedder.model, embedder.tokenizer, loaded.pack_position_offset)
        logger.info("model %s: TorchScript packed encoder %s", name, "on" if traced_encoder is not None else "off (eager)")
        loaded.packed_encoder = traced_encoder or loaded.packed_encoder
