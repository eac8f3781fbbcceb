"""Loading the models of the media tasks, and what one image or second of audio costs each of them.

A CLIP-style model (a text tower and a vision tower projecting into one space) is loaded
once and shared by its text feature-extraction, image-feature-extraction and zero-shot
image classification tasks. Every image processor is a PIL/numpy one: torchvision (which
transformers' fast processors need) is not installed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from transformers import (
    AutoConfig,
    AutoImageProcessor,
    AutoModel,
    AutoModelForImageTextToText,
    AutoTokenizer,
    pipeline,
)

from models_registry.media.item import IMAGE

IMAGE_TASKS = ("image-classification", "zero-shot-image-classification", "image-feature-extraction",
               "object-detection", "image-to-text")
AUDIO_TASKS = ("audio-classification", "automatic-speech-recognition")
MEDIA_TASKS = IMAGE_TASKS + AUDIO_TASKS
# transformers pipelines that take decoded inputs (PIL images, sample arrays) as they are.
PIPELINE_TASKS = ("image-classification", "object-detection", "audio-classification", "automatic-speech-recognition")
DUAL_TASKS = ("feature-extraction", "image-feature-extraction", "zero-shot-image-classification")
DUAL_MODEL_TYPES = ("clip", "siglip", "siglip2", "chinese_clip", "altclip")
DEFAULT_IMAGE_TOKENS = 197  # a 224-pixel ViT-B/16: 196 patches and the class token
DEFAULT_FRAMES_PER_S = 50.0  # wav2vec2, HuBERT: one frame per 20 ms


@dataclass
class DualEncoder:
    """A CLIP-style model: text and image towers into one space, one loaded copy for all its tasks."""

    model: Any
    tokenizer: Any
    image_processor: Any
    device: str


@dataclass
class ImageEncoder:
    """A vision backbone for image-feature-extraction (pooled from its last hidden state)."""

    model: Any
    image_processor: Any
    device: str


@dataclass
class Captioner:
    """An image-to-text model (a VisionEncoderDecoder or an image-text-to-text model) and its processors."""

    model: Any
    image_processor: Any
    tokenizer: Any
    device: str


@dataclass(frozen=True)
class MediaCosts:
    """What one item costs a model: patch tokens per image, encoder frames per second of audio."""

    image_tokens: int = DEFAULT_IMAGE_TOKENS
    audio_frames_per_s: float = DEFAULT_FRAMES_PER_S
    sampling_rate: int | None = None  # the rate clips are resampled to


def is_dual_encoder(source: str, revision: str | None) -> bool:
    """Whether the model is CLIP-like (its text task embeds into the images' space)."""
    try:
        config = AutoConfig.from_pretrained(source, revision=revision)
    except Exception:  # no config transformers reads: not ours to load; the task's own loader says why
        return False
    return getattr(config, "model_type", None) in DUAL_MODEL_TYPES


def serves(task: str, source: str, revision: str | None) -> bool:
    """Whether this module loads the task kind for the model (a media task, or a CLIP model's text task)."""
    return task in MEDIA_TASKS or (task == "feature-extraction" and is_dual_encoder(source, revision))


def load(task: str, source: str, revision: str | None, device: str, dtype: Any, shared: dict[str, Any]) -> Any:
    """The runner object of one media task kind (or a CLIP model's text task), sharing one copy where it can."""
    if task in DUAL_TASKS and is_dual_encoder(source, revision):
        if "dual" not in shared:
            model = AutoModel.from_pretrained(source, revision=revision, dtype=dtype).to(device).eval()
            shared["dual"] = DualEncoder(model, AutoTokenizer.from_pretrained(source, revision=revision),
                                         _image_processor(source, revision), device)
        return shared["dual"]
    if task in PIPELINE_TASKS:
        pipe = pipeline(task, model=source, revision=revision, device=device, dtype=dtype)
        pipe.model.eval()
        return pipe
    if task == "image-feature-extraction":
        model = AutoModel.from_pretrained(source, revision=revision, dtype=dtype).to(device).eval()
        return ImageEncoder(model, _image_processor(source, revision), device)
    if task == "image-to-text":
        model = AutoModelForImageTextToText.from_pretrained(source, revision=revision, dtype=dtype).to(device).eval()
        return Captioner(model, _image_processor(source, revision),
                         AutoTokenizer.from_pretrained(source, revision=revision), device)
    raise ValueError(f"{task} is not a media task")


def _image_processor(source: str, revision: str | None) -> Any:
    return AutoImageProcessor.from_pretrained(source, revision=revision, backend="pil")


def costs(runners: dict[str, Any]) -> MediaCosts:
    """The model's cost per image and per second of audio, from its config and feature extractor."""
    image_tokens, frames, rate = DEFAULT_IMAGE_TOKENS, DEFAULT_FRAMES_PER_S, None
    for task, runner in runners.items():
        model = getattr(runner, "model", None)
        config = getattr(model, "config", None)
        if config is None:
            continue
        if task in IMAGE_TASKS:
            vision = getattr(config, "vision_config", None) or getattr(config, "encoder", None) or config
            image_tokens = _patch_tokens(vision) or image_tokens
        if task in AUDIO_TASKS:
            strides = getattr(config, "conv_stride", None)
            extractor = getattr(runner, "feature_extractor", None)
            rate = getattr(extractor, "sampling_rate", None) or rate
            if strides and rate:
                frames = rate / math.prod(strides)
    return MediaCosts(image_tokens=image_tokens, audio_frames_per_s=frames, sampling_rate=rate)


def _patch_tokens(config: Any) -> int | None:
    """(image_size / patch_size)^2 + 1 for a ViT-like config (the class token); None when it says no sizes."""
    size, patch = getattr(config, "image_size", None), getattr(config, "patch_size", None)
    if not size or not patch:
        return None
    sides = size if isinstance(size, (list, tuple)) else (size, size)
    patches = patch if isinstance(patch, (list, tuple)) else (patch, patch)
    return (sides[0] // patches[0]) * (sides[1] // patches[1]) + 1


def item_cost(media_costs: MediaCosts, kind: str, seconds: float) -> int:
    """One item's cost for the batcher's token budget and the request's max_request_tokens."""
    if kind == IMAGE:
        return media_costs.image_tokens
    return max(1, math.ceil(seconds * media_costs.audio_frames_per_s))
