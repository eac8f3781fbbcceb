"""Reading a media task's request: the raw file as the body, or JSON whose inputs are base64 strings or data URIs.

As `huggingface_hub.InferenceClient` sends them: the file's bytes (with its Content-Type,
or none) when there are no parameters, `{"inputs": "<base64>", "parameters": {...}}` when
there are. Only the envelope and the header are read here (media.envelope); the pixels and
samples are decoded in the worker.
"""

from __future__ import annotations

from typing import Any

from models_registry.api.hf import payloads
from models_registry.core.conf import conf
from models_registry.core.errors import InvalidInput
from models_registry.media import envelope, fetch
from models_registry.media.item import MediaItem
from models_registry.observe import media_counts
from models_registry.catalog.specs import TaskSpec
from models_registry.tasks import task_inputs

_JSON_TYPES = ("application/json",)
_RAW_TYPES = ("application/octet-stream", "")
_TEXT_TYPES = ("text/plain", "application/x-www-form-urlencoded")


def media_kind(task: str) -> str | None:
    """image or audio for a media task; None for a text task."""
    kind = task_inputs.TASK_KINDS.get(task)
    return kind.media if kind else None


def is_json(media_type: str, raw: bytes) -> bool:
    """Whether a media task's body is the JSON envelope rather than the file itself."""
    if media_type in _JSON_TYPES or media_type.endswith("+json"):
        return True
    # No (or a text) Content-Type: a JSON object is the envelope; no image or audio file starts with "{".
    return media_type in _RAW_TYPES + _TEXT_TYPES and raw.lstrip()[:1] == b"{"


async def read(raw: bytes, content_type: str, model: str, task: TaskSpec) -> tuple[Any, payloads.InferenceRequest]:
    """The request's JSON body ({} for a raw file) and its validated inputs as media items' wire dicts."""
    kind = media_kind(task.task) or ""
    media_type = content_type.split(";")[0].strip().lower()
    if len(raw) > conf.MAX_BODY_BYTES:
        payloads.parse_body(raw, media_type, conf.MAX_BODY_BYTES)  # its 413
    if is_json(media_type, raw):
        body = payloads.parse_body(raw, "application/json", conf.MAX_BODY_BYTES)
        parsed = payloads.read_request(body, task.task, task.parameters, conf.MAX_INPUTS)
        where = "inputs[{}]" if parsed.is_batch else "inputs"
        items = [await item_from_text(text, kind, where.format(i)) for i, text in enumerate(parsed.inputs)]
    elif media_type in _TEXT_TYPES:  # curl -d @photo.b64: the body is one base64 string or data URI
        body, items = {}, [await item_from_text(raw.decode("latin-1"), kind, "the request body")]
        parsed = payloads.InferenceRequest(inputs=[], is_batch=False, parameters=dict(task.parameters))
    else:
        declared = envelope.kind_of_content_type(media_type)
        if declared is None and media_type not in _RAW_TYPES:
            raise InvalidInput(f"unsupported content type {media_type!r} for {task.task}: send the file as "
                               f"{kind}/*, application/octet-stream, or JSON with base64 inputs")
        envelope.check_kind(kind, declared, "the request body")
        body, items = {}, [_probe(raw, kind, "the request body")]
        parsed = payloads.InferenceRequest(inputs=[], is_batch=False, parameters=dict(task.parameters))
    task_inputs.check_required(task.task, parsed.parameters)
    envelope.check_request_pixels(items, conf.MAX_REQUEST_PIXELS)  # before a worker decodes any of them
    media_counts.count(model, task.name, items)
    return body, payloads.InferenceRequest(inputs=[item.wire() for item in items], is_batch=parsed.is_batch,
                                           parameters=parsed.parameters)


async def item_from_text(text: str, kind: str, where: str) -> MediaItem:
    """A media item from a base64 string, a data URI, or (only for a host in HOSTING_MEDIA_FETCH_HOSTS) a URL."""
    if fetch.is_url(text):
        data, declared_type = await fetch.fetch(text, where)
    else:
        data, declared_type = envelope.decode_text(text, where)
    envelope.check_kind(kind, envelope.kind_of_content_type(declared_type or ""), where)
    return _probe(data, kind, where)


def _probe(data: bytes, kind: str, where: str) -> MediaItem:
    return envelope.probe(data, kind, where, conf.MAX_IMAGE_PIXELS, conf.MAX_AUDIO_SECONDS)
