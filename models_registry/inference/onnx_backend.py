"""The ONNX Runtime backend for packed embedding forwards: sessions, the load check, the int8 accuracy report.

Measured with MiniLM on one CPU thread (the worker layout), the bench corpus in batches of
8 / 20 / 32 sentences: packed ONNX Runtime 316 / 385 / 390 sentences per CPU second against
200 / 290 / 280 for length-sorted padded batches on the same runtime, so the export keeps
the block-diagonal 4D mask and position ids as inputs. Rows of 32-64 tokens were fastest
(96: 360, 128: 337).
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models_registry.inference import onnx_export, packing
from models_registry.inference.packed_forward import (
    PACKING_CHECK_TEXTS,
    EagerEncoder,
    output_tolerance,
    packed_inputs,
    relative_error,
)

logger = logging.getLogger(__name__)

ROW_TOKENS = 64
BACKENDS = ("auto", "torch", "onnxruntime")
# A fixed sample for the int8 report: short and long, plain and technical, questions and lists.
SAMPLE_TEXTS = (
    "Hello there.", "ok", "What time does the train to Paris leave tomorrow morning?",
    "The quick brown fox jumps over the lazy dog.", "Django hosts models now.",
    "A somewhat longer sentence, to check that packed inputs stay apart from each other in one row.",
    "Interest rates rose by a quarter point, the third increase this year.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "I loved the film, but the ending felt rushed and the music was far too loud.",
    "Install the package, run the migrations, then start the web server and one worker.",
    "def add(a, b): return a + b", "SELECT name FROM users WHERE active = 1 ORDER BY name;",
    "Error 503: the service is temporarily unavailable, please retry after a few seconds.",
    "Mount Everest is the highest mountain above sea level, on the border of Nepal and China.",
    "apples, pears, plums, cherries and a few oranges", "Where is the nearest pharmacy?",
    "The committee postponed its decision until more evidence on the safety of the bridge was available.",
    "She said nothing.", "Batching requests amortises the cost of each forward pass over many inputs.",
    "Neural networks learn representations of text that place similar sentences close together.",
    "Il pleut depuis ce matin.", "Der Zug hat zehn Minuten Verspätung.", "2 + 2 = 4", "!!!",
    "The museum opens at nine on weekdays and at ten on Sundays; it is closed on public holidays.",
    "Please summarise the attached report in three bullet points for the board meeting on Friday.",
    "A cat sat on the mat.", "Shares of the company fell sharply after the quarterly results missed estimates.",
    "How do I reset my password if I no longer have access to my email account?",
    "The patient reported mild headaches and occasional dizziness over the past two weeks.",
    "Rain is expected in the north, with sunny spells in the south and light winds.",
    "Version 2.3 fixes a memory leak in the connection pool and adds retries with backoff.",
)


@dataclass(frozen=True)
class OrtReport:
    """What the load check found: the backend in use, why, and int8's cosine to fp32 (min, median)."""

    backend: str
    reason: str = ""
    int8_min_cosine: float | None = None
    int8_median_cosine: float | None = None

    def as_state(self) -> dict[str, Any]:
        """The fields a worker reports in its heartbeat."""
        state: dict[str, Any] = {"backend": self.backend}
        if self.reason:
            state["backend_reason"] = self.reason
        if self.int8_min_cosine is not None:
            state["int8_cosine"] = {"min": round(self.int8_min_cosine, 5), "median": round(self.int8_median_cosine or 0, 5)}
        return state


class Int8Refused(ValueError):
    """int8 was asked for, but its vectors stray further from fp32 than the configured floor allows."""


class OrtEncoder:
    """A packed forward on ONNX Runtime (a backend.PackedEncoder, as the torch ones)."""

    def __init__(self, path: Path, threads: int, arena: bool = True) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        # The CPU arena grows in powers of two and keeps what it took: the process' peak then
        # follows the largest batch ever run, not the batch measured, and the batch memory fit
        # was off by up to 88%. Without it every tensor is malloc'ed and freed (large ones as
        # their own mappings while a batch is measured), so peaks are the batch's own.
        options.enable_cpu_mem_arena = arena
        options.intra_op_num_threads = max(1, threads)
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        if threads > 1:
            # Spinning threads steal the core the web process needs on a shared machine.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.path = path
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.names = {i.name for i in self.session.get_inputs()}
        self.row_tokens = ROW_TOKENS

    def __call__(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """The last hidden state of one packed forward (copied through numpy on the CPU)."""
        feed = {name: tensor.cpu().numpy() for name, tensor in inputs.items() if name in self.names}
        return torch.from_numpy(self.session.run(None, feed)[0])


def _packed(tokenizer: Any, texts: tuple[str, ...] | list[str], offset: int, row_tokens: int) -> tuple[list[Any], list[int]]:
    """The texts' packed forwards as (inputs, owner) pairs, and their token counts."""
    encoded = tokenizer(list(texts), truncation=True)
    ids, types = encoded["input_ids"], encoded.get("token_type_ids")
    plans = packing.plan_packing([len(x) for x in ids], row_tokens=row_tokens)
    pad = tokenizer.pad_token_id or 0
    return [packed_inputs(p, ids, types, offset, pad, "cpu", torch.float32) for p in plans], [len(x) for x in ids]


def mean_vectors(encoder: Any, tokenizer: Any, texts: tuple[str, ...] | list[str], offset: int) -> np.ndarray:
    """L2-normalised mean-pooled vectors of texts through a packed encoder."""
    forwards, lengths = _packed(tokenizer, texts, offset, ROW_TOKENS)
    pooled: torch.Tensor | None = None
    with torch.inference_mode():
        for inputs, owner in forwards:
            hidden = encoder(inputs).float()
            if pooled is None:
                pooled = torch.zeros(len(lengths), hidden.shape[-1])
            real = owner >= 0
            pooled.index_add_(0, owner[real], hidden.reshape(-1, hidden.shape[-1])[real])
    assert pooled is not None
    pooled = pooled / torch.tensor(lengths, dtype=pooled.dtype).unsqueeze(1)
    return torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()


def check_encoder(model: Any, tokenizer: Any, encoder: OrtEncoder, offset: int) -> None:
    """Raise unless the ONNX forward reproduces the model's own on real inputs, in two packing shapes."""
    texts = PACKING_CHECK_TEXTS + SAMPLE_TEXTS[:8]
    eager = EagerEncoder(model)
    with torch.inference_mode():
        for row_tokens in (1, ROW_TOKENS):
            for inputs, _owner in _packed(tokenizer, texts, offset, row_tokens)[0]:
                want, got = eager(inputs), encoder(inputs)
                if got.shape != want.shape:
                    raise ValueError(f"ONNX output shape {tuple(got.shape)} instead of {tuple(want.shape)}")
                error = relative_error(got, want)
                if error > output_tolerance(torch.float32):
                    raise ValueError(f"ONNX outputs differ from torch's by {error:.2g} (relative)")


def int8_cosines(fp32: Any, int8: Any, tokenizer: Any, offset: int) -> tuple[float, float]:
    """Minimum and median cosine between int8 and fp32 sentence vectors on the fixed sample."""
    a, b = mean_vectors(fp32, tokenizer, SAMPLE_TEXTS, offset), mean_vectors(int8, tokenizer, SAMPLE_TEXTS, offset)
    cosines = np.sum(a * b, axis=1).tolist()
    return float(min(cosines)), float(statistics.median(cosines))


def load_ort_encoder(model: Any, tokenizer: Any, offset: int, *, source: str, revision: str, cache_dir: Path,
                     int8: bool, int8_floor: float, threads: int, arena: bool = True) -> tuple[OrtEncoder, OrtReport]:
    """Export (or reuse), open and check the ONNX packed encoder; raise with the reason if it cannot serve.

    Int8Refused when int8 was asked for and its minimum cosine to fp32 is under int8_floor.
    """
    forwards, _ = _packed(tokenizer, PACKING_CHECK_TEXTS, offset, row_tokens=1)  # several rows: a real 4D mask
    folder = cache_dir / onnx_export.cache_key(source, revision, model)
    fp32_path = onnx_export.export_packed_encoder(model, forwards[0][0], folder / "model.onnx")
    encoder = OrtEncoder(fp32_path, threads, arena)
    check_encoder(model, tokenizer, encoder, offset)
    if not int8:
        return encoder, OrtReport(backend="onnxruntime")
    figures: list[str] = []
    for label, keep_float in (("every matrix product", ()),
                              ("feed-forward outputs and first layer in float", onnx_export.float_kept_nodes(fp32_path))):
        if figures and not keep_float:
            break
        name = "model-int8.onnx" if not keep_float else "model-int8-partial.onnx"
        quantized = OrtEncoder(onnx_export.quantize_int8(fp32_path, folder / name, tuple(keep_float)), threads, arena)
        low, median = int8_cosines(encoder, quantized, tokenizer, offset)
        if low >= int8_floor:
            return quantized, OrtReport(backend="onnxruntime", reason=f"int8: {label}", int8_min_cosine=low,
                                        int8_median_cosine=median)
        figures.append(f"{label}: minimum {low:.4f}, median {median:.4f}")
    raise Int8Refused(
        f"int8 vectors stray too far from fp32 on {len(SAMPLE_TEXTS)} sample sentences (cosine, {'; '.join(figures)}), "
        f"under the floor of {int8_floor}: use dtype float32, or lower HOSTING_INT8_MIN_COSINE if that accuracy is "
        "acceptable")

@dataclass(frozen=True)
class OrtSettings:
    """Where exports are cached, and the int8 accuracy floor (from hosting settings, via the runner)."""

    cache_dir: Path
    int8_min_cosine: float = 0.99
    arena: bool = True  # off while the batch memory cap measures batches (HOSTING_MEMORY_CAP)


def choose_encoder(spec: Any, device: str, embedder: Any, offset: int | None,
                   settings: OrtSettings | None) -> tuple[OrtEncoder | None, OrtReport]:
    """The ONNX Runtime encoder for a model's packed embeddings, or None (torch) with the reason.

    Raises when dtype int8 was asked for and cannot be served: int8 has no torch fallback.
    """
    int8 = spec.dtype == "int8"
    if spec.backend == "torch":
        return None, OrtReport(backend="torch", reason="backend torch in the registry")
    model = embedder.model
    why_not = ""
    if settings is None:
        why_not = "no ONNX cache directory configured"
    elif device != "cpu":
        why_not = f"ONNX Runtime runs on the CPU here; this model is on {device}"
    elif model.dtype != torch.float32:
        why_not = f"the model loaded as {model.dtype}; the export is float32 only"
    elif offset is None:
        why_not = "packed forwards do not reproduce this model's outputs (the export needs position ids and a 4D mask)"
    else:
        try:
            return load_ort_encoder(model, embedder.tokenizer, offset, source=spec.source, revision=spec.revision,
                                    cache_dir=settings.cache_dir, int8=int8, int8_floor=settings.int8_min_cosine,
                                    threads=torch.get_num_threads(), arena=settings.arena)
        except Int8Refused:
            raise
        except Exception as error:  # noqa: BLE001 - an export or check that fails keeps torch, with the reason logged
            why_not = f"{type(error).__name__}: {error}"
    if int8:
        raise ValueError(f"dtype int8 needs ONNX Runtime, which this model cannot use: {why_not}")
    log = logger.warning if spec.backend == "onnxruntime" else logger.info
    log("model %s: ONNX Runtime not used (%s); packed forwards stay on torch", spec.name, why_not)
    return None, OrtReport(backend="torch", reason=why_not)
