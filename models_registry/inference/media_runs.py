"""The runs of the media tasks, and of a CLIP-style model's text task, by task kind."""

from __future__ import annotations

from typing import Any

from models_registry.inference import audio_tasks, vision_tasks
from models_registry.inference.media_models import MEDIA_TASKS, DualEncoder
from models_registry.catalog.specs import TaskSpec

RUNS = {
    "image-classification": vision_tasks.image_classification,
    "zero-shot-image-classification": vision_tasks.zero_shot_image_classification,
    "object-detection": vision_tasks.object_detection,
    "image-to-text": vision_tasks.image_to_text,
    "audio-classification": audio_tasks.audio_classification,
    "automatic-speech-recognition": audio_tasks.automatic_speech_recognition,
}


def handles(task: TaskSpec, pipe: Any) -> bool:
    """Whether the task's batch runs here (a media task, or the text task of a CLIP model)."""
    return task.task in MEDIA_TASKS or isinstance(pipe, DualEncoder)


def run(task: TaskSpec, pipe: Any, inputs: list[Any], params: dict[str, Any]) -> list[Any]:
    """One output per input, in input order (the inputs are PendingMedia, or texts for a CLIP text task).

    pipe: the task kind's loaded pipeline (a transformers pipeline or one of media_models' own).
    """
    if task.task == "feature-extraction":
        return vision_tasks.text_features(pipe, inputs, params, task.normalize)
    if task.task == "image-feature-extraction":
        return vision_tasks.image_features(pipe, inputs, params, task.pooling, task.normalize)
    return RUNS[task.task](pipe, inputs, params)
