"""Infinity's `"modality": "image"|"audio"` on POST /v1/embeddings: data URIs (or base64) embedded by a media task.

The model id names the model (the openai SDK sends it as is); with modality image its
image-feature-extraction task answers, so a CLIP model's text and image vectors come from
one id, in one space, as Infinity serves them.
"""

from __future__ import annotations

from typing import Any

from models_registry.api.pipeline import model_lookup
from models_registry.core import paths
from models_registry.api.hf import media_requests
from models_registry.core.conf import conf
from models_registry.core.errors import InvalidInput
from models_registry.core.task_key import TaskKey
from models_registry.media import envelope
from models_registry.observe import media_counts
from models_registry.catalog.specs import ModelSpec, TaskSpec

MODALITIES = ("image",)  # Infinity's "audio" is refused by the request's shape: no audio embedding task yet
EMBEDDING_TASKS = {"image": "image-feature-extraction"}


def resolve(model_id: str, modality: str, specs: dict[str, ModelSpec]) -> tuple[ModelSpec, TaskSpec]:
    """The model's task that embeds modality: the named task, or the model's first one of that kind."""
    name, task_name = TaskKey.parse(model_id)
    spec = model_lookup.named_model(name, specs, paths.shown_path("openai-models"))
    wanted = EMBEDDING_TASKS.get(modality)
    candidates = [spec.tasks[task_name]] if task_name in spec.tasks else list(spec.tasks.values())
    task = next((t for t in candidates if t.task == wanted), None)
    if task is None:
        raise InvalidInput(f"{model_id!r} has no {modality} embedding task ({wanted})")
    return spec, task


async def items(inputs: list[str], modality: str, spec: ModelSpec, task: TaskSpec) -> list[dict[str, Any]]:
    """The inputs (data URIs, base64, or an allowed host's URLs) as media items' wire dicts, headers checked."""
    where = "input[{}]" if len(inputs) > 1 else "input"
    found = [await media_requests.item_from_text(text, modality, where.format(i)) for i, text in enumerate(inputs)]
    envelope.check_request_pixels(found, conf.MAX_REQUEST_PIXELS)
    media_counts.count(spec.name, task.name, found)
    return [item.wire() for item in found]
