"""Task runs on images: classification, zero-shot classification, feature extraction, detection, captions.

Every run takes the batch's PendingMedia inputs and decodes them first (decoding started
when the items arrived, so it is usually done): a pipeline only ever sees PIL images,
never a string it would open as a path or fetch as a URL.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from models_registry.core.errors import InvalidInput
from models_registry.inference.media_models import Captioner, DualEncoder, ImageEncoder
from models_registry.inference.task_common import per_input, to_plain
from models_registry.media.pending import opened

DEFAULT_TOP_K = 5  # the HF Inference API's default for the classification tasks
DEFAULT_TEMPLATE = "This is a photo of {}."
# PIL images of 1x1 or 3x3 pixels look like channels-first arrays to the processors' guess:
# say which layout they are in (a 1x1 image broke Infinity's route until a restart).
CHANNELS_LAST = {"input_data_format": "channels_last"}


def image_classification(pipe: Any, inputs: list[Any], params: dict[str, Any]) -> list[Any]:
    """[{label, score}, ...] per image, best first (top_k, default 5)."""
    images = opened(inputs)
    kwargs: dict[str, Any] = {"top_k": min(params.get("top_k") or DEFAULT_TOP_K, pipe.model.config.num_labels)}
    if params.get("function_to_apply"):
        kwargs["function_to_apply"] = params["function_to_apply"]
    raw = pipe(images, batch_size=len(images), **kwargs)
    return [to_plain(r if isinstance(r, list) else [r]) for r in per_input(raw, len(images))]


def object_detection(pipe: Any, inputs: list[Any], params: dict[str, Any]) -> list[Any]:
    """[{label, score, box: {xmin, ymin, xmax, ymax}}, ...] per image."""
    images = opened(inputs)
    threshold = params.get("threshold")
    raw = pipe(images, batch_size=len(images), threshold=0.5 if threshold is None else threshold)
    return [to_plain(r) for r in per_input(raw, len(images))]


def _pixels(processor: Any, images: list[Any], device: str) -> torch.Tensor:
    return processor(images=images, return_tensors="pt", **CHANNELS_LAST)["pixel_values"].to(device)


def _features(output: Any) -> torch.Tensor:
    """get_image_features / get_text_features: a tensor in older transformers, an output object in 5."""
    return output if isinstance(output, torch.Tensor) else output.pooler_output


def _as_vectors(vectors: torch.Tensor, normalize: bool) -> list[Any]:
    if normalize:
        vectors = torch.nn.functional.normalize(vectors.float(), dim=-1)
    array = np.ascontiguousarray(vectors.float().cpu().numpy(), dtype="<f4")
    return [[row.tobytes(), [array.shape[1]]] for row in array]


def image_features(runner: DualEncoder | ImageEncoder, inputs: list[Any], params: dict[str, Any],
                   pooling: str, normalize: bool) -> list[Any]:
    """One vector per image as [float32 bytes, shape] (a CLIP model's: in its text vectors' space)."""
    images = opened(inputs)
    pixels = _pixels(runner.image_processor, images, runner.device)
    normalize = normalize if params.get("normalize") is None else params["normalize"]
    if isinstance(runner, DualEncoder):
        return _as_vectors(_features(runner.model.get_image_features(pixel_values=pixels)), normalize)
    hidden = runner.model(pixel_values=pixels).last_hidden_state
    pooled = hidden.mean(dim=1) if (params.get("pooling") or pooling) == "mean" else hidden[:, 0]
    return _as_vectors(pooled, normalize)


def text_features(runner: DualEncoder, texts: list[str], params: dict[str, Any], normalize: bool) -> list[Any]:
    """A CLIP model's text vectors (the `text` task beside its `image` task), as [float32 bytes, shape]."""
    tokens = runner.tokenizer(texts, padding=True, truncation=True, return_tensors="pt").to(runner.device)
    normalize = normalize if params.get("normalize") is None else params["normalize"]
    return _as_vectors(_features(runner.model.get_text_features(**tokens)), normalize)


def zero_shot_image_classification(runner: DualEncoder, inputs: list[Any], params: dict[str, Any]) -> list[Any]:
    """[{label, score}, ...] per image over the candidate labels, best first (CLIP: softmax; SigLIP: sigmoid)."""
    labels = params.get("candidate_labels")
    if not labels:
        raise InvalidInput("zero-shot-image-classification needs parameters.candidate_labels")
    template = params.get("hypothesis_template") or DEFAULT_TEMPLATE
    images = opened(inputs)
    tokens = runner.tokenizer([template.format(label) for label in labels], padding=True, truncation=True,
                              return_tensors="pt").to(runner.device)
    output = runner.model(**tokens, pixel_values=_pixels(runner.image_processor, images, runner.device))
    logits = output.logits_per_image.float()
    # SigLIP is trained with a sigmoid per (image, text) pair; CLIP with a softmax over the texts.
    sigmoid = str(getattr(runner.model.config, "model_type", "")).startswith("siglip")
    scores = (logits.sigmoid() if sigmoid else logits.softmax(dim=-1)).cpu().tolist()
    return [sorted(({"label": label, "score": score} for label, score in zip(labels, row)),
                   key=lambda entry: -entry["score"]) for row in scores]


def image_to_text(runner: Captioner, inputs: list[Any], params: dict[str, Any]) -> list[Any]:
    """[{generated_text}] per image (the HF spec's list)."""
    images = opened(inputs)
    pixels = _pixels(runner.image_processor, images, runner.device)
    kwargs: dict[str, Any] = {}
    generate = dict(params.get("generate_kwargs") or {})
    if params.get("max_new_tokens") is not None:
        generate["max_new_tokens"] = params["max_new_tokens"]
    kwargs.update(generate)
    ids = runner.model.generate(pixel_values=pixels, **kwargs)
    texts = runner.tokenizer.batch_decode(ids, skip_special_tokens=True)
    return [[{"generated_text": text.strip()}] for text in texts]
