"""ONNX Runtime for the tasks that read a model's logits (classification, token classification, fill-mask, ranking).

The model's forward is exported once (padded batches: these tasks run through transformers
pipelines or length-sorted micro-batches) and swapped in place of the torch forward after
a load check on real inputs, so the pipelines and runners stay as they are.
"""

from __future__ import annotations

import copy
import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from transformers.modeling_outputs import SequenceClassifierOutput

from models_registry.inference import onnx_export
from models_registry.inference.onnx_backend import SAMPLE_TEXTS, OrtEncoder, OrtSettings
from models_registry.inference.packed_forward import output_tolerance, relative_error

logger = logging.getLogger(__name__)

LOGITS_TASKS = ("text-classification", "token-classification", "fill-mask", "text-ranking")
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class _Logits(torch.nn.Module):
    """Named tensor inputs in, logits out."""

    def __init__(self, model: Any, names: tuple[str, ...]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *tensors: Any) -> Any:
        return self.model(**dict(zip(self.names, tensors))).logits


def _check_inputs(tokenizer: Any, task: str) -> dict[str, Any]:
    """A padded batch of real inputs (pairs for a ranker; a mask token for fill-mask)."""
    texts = list(SAMPLE_TEXTS[:6])
    if task == "fill-mask":
        texts = [f"{t} {tokenizer.mask_token}" for t in texts]
    pairs = (texts[:3], texts[3:6]) if task == "text-ranking" else (texts,)
    encoded = tokenizer(*pairs, padding=True, truncation=True, return_tensors="pt")
    return {name: encoded[name] for name in INPUTS if name in encoded}


def _export(model: Any, example: dict[str, Any], path: Path) -> Path:
    names = tuple(example)

    def build(temporary: Path) -> None:
        with torch.inference_mode():
            per_token = model(**example).logits.dim() == 3  # token classification, fill-mask
        axes = {name: {0: "batch", 1: "tokens"} for name in names}
        axes["logits"] = {0: "batch", 1: "tokens"} if per_token else {0: "batch"}
        # A copy: the exporter leaves the module it traced computing differently afterwards.
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(_Logits(copy.deepcopy(model), names).eval(), tuple(example[n] for n in names),
                              str(temporary), input_names=list(names), output_names=["logits"], dynamic_axes=axes,
                              opset_version=onnx_export.OPSET, dynamo=False)

    return onnx_export.cached(path, build)


def use_onnxruntime(spec: Any, task: str, device: str, model: Any, tokenizer: Any, settings: OrtSettings | None) -> str:
    """Swap model.forward for its ONNX Runtime copy where it reproduces the logits; the backend in use, with why not."""
    if spec.backend == "torch" or settings is None:
        return "torch"
    if device != "cpu" or model.dtype != torch.float32:
        return "torch (ONNX Runtime serves float32 on the CPU only)"
    try:
        example = _check_inputs(tokenizer, task)
        folder = settings.cache_dir / onnx_export.cache_key(spec.source, spec.revision, model)
        session = OrtEncoder(_export(model, example, folder / "logits.onnx"), torch.get_num_threads()).session
        names = {i.name for i in session.get_inputs()}
        original = model.forward

        def forward(**inputs: Any) -> Any:
            feed = {name: inputs[name].cpu().numpy() for name in INPUTS if name in names and inputs.get(name) is not None}
            return SequenceClassifierOutput(logits=torch.from_numpy(session.run(None, feed)[0]))

        other_shape = {name: tensor[:2, : max(2, tensor.shape[1] - 3)] for name, tensor in example.items()}
        with torch.inference_mode():
            for inputs in (example, other_shape):
                want, got = original(**inputs).logits, forward(**inputs).logits
                error = relative_error(got, want) if got.shape == want.shape else float("inf")
                if error > output_tolerance(torch.float32):
                    raise ValueError(f"ONNX logits differ from torch's by {error:.2g} (relative)")
    except Exception as error:  # noqa: BLE001 - an export or check that fails keeps torch, with the reason logged
        logger.warning("model %s/%s: ONNX Runtime not used (%s: %s)", spec.name, task, type(error).__name__, error)
        return f"torch ({type(error).__name__}: {error})"
    model.forward = forward  # on the instance: the class's own forward stays there for eager()
    return "onnxruntime"


@contextmanager
def eager(model: Any) -> Iterator[None]:
    """The model's torch forward while the block runs, where use_onnxruntime swapped it (rows its hooks change)."""
    swapped = model.__dict__.pop("forward", None)
    try:
        yield
    finally:
        if swapped is not None:
            model.forward = swapped
