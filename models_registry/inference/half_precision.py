"""dtype auto: half precision where a probe at load shows the model's outputs unchanged, else the checkpoint's float32.

Issue 26 measured a MiniLM-shaped encoder's forward 3.2x faster in fp16 than fp32 on an
H200 (batch 1,024). As ONNX Runtime is chosen on CPU (onnx_backend: exported, then checked
against torch on real inputs), each candidate half dtype is tried on a copy of the loaded
model and kept only where, on a fixed probe set, every sentence vector keeps a cosine of at
least MIN_COSINE to float32's and every classifier gives float32's label. Only CUDA tries
it by default; the probe itself runs on any device (tests try bfloat16 on the CPU).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Any

import torch

from models_registry.inference.onnx_backend import SAMPLE_TEXTS

logger = logging.getLogger(__name__)

MIN_COSINE = 0.9995  # the floor for vectors; classifiers must keep every label
HALF_DTYPES: dict[str, Any] = {"float16": torch.float16, "bfloat16": torch.bfloat16}
# Candidates by device kind when nobody says otherwise: float16 first (more mantissa bits
# than bfloat16, so closer to float32), bfloat16 where float16 overflows or strays.
DEFAULT_CANDIDATES: dict[str, tuple[str, ...]] = {"cuda": ("float16", "bfloat16")}
# Task kinds the probe can judge: vectors (cosine) or labels (argmax of the logits).
VECTOR_TASKS = frozenset({"feature-extraction"})
# (A ranking cross-encoder's one logit has no label to compare: it keeps float32.)
LABEL_TASKS = frozenset({"text-classification", "zero-shot-classification", "token-classification"})


@dataclass(frozen=True)
class DtypeChoice:
    """The dtype the model serves in, why, and the probe's worst vector cosine (None: no vectors probed)."""

    dtype: str
    reason: str
    min_cosine: float | None = None

    def as_state(self) -> dict[str, Any]:
        """The fields a worker reports in its heartbeat (the admin and GET /models/<name> show them)."""
        state: dict[str, Any] = {"active_dtype": self.dtype, "dtype_reason": self.reason}
        if self.min_cosine is not None:
            state["half_min_cosine"] = round(self.min_cosine, 6)
        return state


@dataclass(frozen=True)
class Probe:
    """One candidate's outcome: the worst vector cosine to float32 and whether every label held (None: not probed)."""

    dtype: str
    min_cosine: float | None = None
    same_labels: bool | None = None
    error: str = ""


def candidates(device: str, asked: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The half dtypes dtype auto tries on device: asked when given (tests: bfloat16 on cpu), else the defaults."""
    if asked is not None:
        return asked
    return DEFAULT_CANDIDATES.get(device.split(":")[0], ())


def decide(base: str, probes: list[Probe], min_cosine: float = MIN_COSINE) -> DtypeChoice:
    """The first candidate whose probe passed, else base, with the figures that decided (pure)."""
    figures: list[str] = []
    for probe in probes:
        if probe.error:
            figures.append(f"{probe.dtype}: {probe.error}")
            continue
        vectors_ok = probe.min_cosine is None or probe.min_cosine >= min_cosine
        labels_ok = probe.same_labels is None or probe.same_labels
        if probe.min_cosine is None and probe.same_labels is None:
            figures.append(f"{probe.dtype}: nothing to compare")
            continue
        measured = [f"min cosine {probe.min_cosine:.5f}"] if probe.min_cosine is not None else []
        measured += [f"labels {'same' if probe.same_labels else 'differ'}"] if probe.same_labels is not None else []
        if vectors_ok and labels_ok:
            return DtypeChoice(probe.dtype, f"auto: {probe.dtype} matches {base} on {len(SAMPLE_TEXTS)} probe texts "
                                            f"({', '.join(measured)})", probe.min_cosine)
        figures.append(f"{probe.dtype}: {', '.join(measured)}")
    if not probes:
        return DtypeChoice(base, f"auto: {base} (half precision is tried on CUDA only)")
    return DtypeChoice(base, f"auto: {base}, half precision strays ({'; '.join(figures)}; "
                             f"floor cosine {min_cosine}, same labels)")


def _outputs(kind: str, model: Any, tokenizer: Any) -> torch.Tensor:
    """The probe texts' mean-pooled vectors (vector tasks) or argmax labels (label tasks) through model."""
    texts = list(SAMPLE_TEXTS)
    if kind == "zero-shot-classification":  # (premise, hypothesis) pairs, as the pipeline sends
        texts = texts[1:] + texts[:1]
        encoded = tokenizer(list(SAMPLE_TEXTS), texts, truncation=True, padding=True, return_tensors="pt")
    else:
        encoded = tokenizer(texts, truncation=True, padding=True, return_tensors="pt")
    encoded = {k: v.to(model.device) for k, v in encoded.items()}
    with torch.inference_mode():
        output = model(**encoded)
    if kind in VECTOR_TASKS:
        hidden = output.last_hidden_state.float()
        mask = encoded["attention_mask"].unsqueeze(-1).float()
        return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=1)
    labels = output.logits.float().argmax(-1)
    if kind == "token-classification":  # padding positions are no one's label
        labels = labels.masked_fill(encoded["attention_mask"] == 0, -1)
    return labels


def probe(kind: str, model: Any, tokenizer: Any, dtype: str) -> Probe:
    """Compare a copy of model in dtype with model (float32) on the probe texts."""
    try:
        reference = _outputs(kind, model, tokenizer)
        half = copy.deepcopy(model).to(HALF_DTYPES[dtype])
        got = _outputs(kind, half, tokenizer)
        del half
    except Exception as error:  # noqa: BLE001 - a model that cannot run in this dtype keeps float32
        return Probe(dtype, error=f"{type(error).__name__}: {error}")
    if kind in VECTOR_TASKS:
        cosine = (reference * got).sum(1)
        if not torch.isfinite(cosine).all():
            return Probe(dtype, error="overflow (non-finite outputs)")
        return Probe(dtype, min_cosine=float(cosine.min()))
    return Probe(dtype, same_labels=bool(torch.equal(reference, got)))


def choose(pipelines: dict[str, Any], device: str, asked: tuple[str, ...] | None = None) -> DtypeChoice:
    """dtype auto for a loaded model (its pipelines, float32): the half dtype every task's probe passes, else float32.

    Converts the pipelines' models in place when a half dtype is chosen.
    """
    tried = candidates(device, asked)
    models = {kind: p for kind, p in pipelines.items() if getattr(p, "model", None) is not None}
    dtypes = {p.model.dtype for p in models.values()}
    if dtypes != {torch.float32}:
        return DtypeChoice(_name(dtypes), "auto: the checkpoint's dtype (not float32: no probe)")
    if not tried:
        return decide("float32", [])
    not_judged = sorted(kind for kind in models if kind not in VECTOR_TASKS | LABEL_TASKS)
    if not_judged or not models:
        return DtypeChoice("float32", f"auto: float32 (no half-precision probe for {', '.join(not_judged) or 'this model'})")
    probes: list[Probe] = []
    for dtype in tried:
        results = [probe(kind, p.model, p.tokenizer, dtype) for kind, p in models.items()]
        probes.append(_merge(dtype, results))
        choice = decide("float32", probes)
        if choice.dtype != "float32":
            for p in models.values():
                p.model.to(HALF_DTYPES[dtype])
            logger.info("dtype auto: %s", choice.reason)
            return choice
    choice = decide("float32", probes)
    logger.info("dtype auto: %s", choice.reason)
    return choice


def _merge(dtype: str, results: list[Probe]) -> Probe:
    errors = [r.error for r in results if r.error]
    cosines = [r.min_cosine for r in results if r.min_cosine is not None]
    labels = [r.same_labels for r in results if r.same_labels is not None]
    return Probe(dtype, min(cosines) if cosines else None, all(labels) if labels else None, "; ".join(errors))


def _name(dtypes: set[Any]) -> str:
    return ", ".join(sorted(str(d).removeprefix("torch.") for d in dtypes)) or "none"
