"""OpenAI's POST /v1/audio/transcriptions over an automatic-speech-recognition task, through the same batched path.

The multipart form (`file`, `model`, `response_format`, `language`, `prompt`, `temperature`) is
read with Django's own multipart parser; the file is checked as the HF route checks an audio
body (its header, its length within HOSTING_MAX_AUDIO_SECONDS) and batched with the task's other
requests. `json` answers `{"text"}`, `text` the text alone, `verbose_json` also the language
asked, the clip's duration and one segment spanning it (the task's pipeline gives no per-segment
times here). `srt` and `vtt` are refused with a 400 that says so. `language` (an ISO-639-1 code, as
OpenAI's) and `temperature` (0 to 1) reach the worker as the task's parameters, where a Whisper model
generates with them (inference.audio_tasks) and a CTC model, which has no decoder to steer, ignores
them; `prompt` is accepted and not used.
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass
from typing import Any

from typing_extensions import TypedDict

from django.core.files.uploadhandler import MemoryFileUploadHandler
from django.http import QueryDict
from django.http.multipartparser import MultiPartParser, MultiPartParserError

from models_registry.api.hf import media_requests
from models_registry.api.openai.openai_routes import model_task
from models_registry.api.pipeline.answer import Answer, PlainText
from models_registry.api.pipeline.call import ApiCall
from models_registry.api.pipeline.error_answers import invalid, openai_error_answer
from models_registry.api.pipeline.inference_route import Work
from models_registry.broker.handoff import InferenceResult
from models_registry.catalog.specs import ModelSpec, TaskSpec
from models_registry.core.conf import conf
from models_registry.core.errors import HostingError, NotFound
from models_registry.core.task_key import TaskKey
from models_registry.media import envelope
from models_registry.media.item import MediaItem
from models_registry.observe import media_counts

TASK = "automatic-speech-recognition"
FORMATS = ("json", "text", "verbose_json")
REFUSED_FORMATS = ("srt", "vtt")
FIELDS = ("file", "model", "response_format", "language", "prompt", "temperature", "timestamp_granularities[]",
          "include[]", "stream", "chunking_strategy")
LANGUAGE = re.compile(r"^[a-z]{2,3}$")  # ISO-639-1, and the few three-letter codes Whisper knows (haw, yue)


@dataclass(frozen=True)
class TranscriptionRequest:
    """A validated transcription form: the model id, the audio's bytes, and how to answer."""

    model: str
    audio: bytes
    response_format: str
    language: str | None
    temperature: float | None = None

    def parameters(self) -> dict[str, object]:
        """What the worker's speech-recognition run takes of the form (inference.audio_tasks)."""
        asked = {"language": self.language, "temperature": self.temperature}
        return {key: value for key, value in asked.items() if value is not None}


def read_form(body: bytes, content_type: str) -> TranscriptionRequest:
    """The multipart form's fields and file; a 400 naming the field for anything amiss."""
    if not content_type.lower().startswith("multipart/form-data"):
        raise invalid("send multipart/form-data with 'file' and 'model' (as the openai SDK does)", None)
    meta = {"CONTENT_TYPE": content_type, "CONTENT_LENGTH": str(len(body))}
    try:
        form, files = MultiPartParser(meta, io.BytesIO(body), [MemoryFileUploadHandler()], "utf-8").parse()
    except MultiPartParserError as error:
        raise invalid(f"the multipart body could not be read: {error}", None) from None
    unknown = sorted(set(form) - set(FIELDS))
    if unknown:
        raise invalid(f"unrecognized request argument(s): {', '.join(unknown)}", unknown[0])
    upload = files.get("file")
    if upload is None:
        raise invalid("'file' is required: the audio file to transcribe", "file")
    model = _field(form, "model")
    if not model:
        raise invalid("'model' is required: a model id from GET /v1/models", "model")
    response_format = _field(form, "response_format") or "json"
    if response_format in REFUSED_FORMATS:
        raise invalid(f"response_format {response_format!r} is not supported here: use one of {', '.join(FORMATS)}",
                      "response_format")
    if response_format not in FORMATS:
        raise invalid(f"response_format must be one of {', '.join(FORMATS)}", "response_format")
    if _field(form, "stream") not in (None, "", "false"):
        raise invalid("streamed transcriptions are not supported: leave 'stream' out", "stream")
    return TranscriptionRequest(model, upload.read(), response_format, _language(_field(form, "language")),
                                _temperature(_field(form, "temperature")))


def _language(value: str | None) -> str | None:
    """The language code asked, lower-cased; a 400 naming language for anything but an ISO-639-1 code."""
    if not value:
        return None
    if not LANGUAGE.match(value.lower()):
        raise invalid(f"'language' must be an ISO-639-1 code such as en or fr, not {value[:40]!r}", "language")
    return value.lower()


def _temperature(value: str | None) -> float | None:
    """The sampling temperature asked; a 400 naming temperature unless it is a number from 0 to 1."""
    if not value:
        return None
    try:
        temperature = float(value)
    except ValueError:
        temperature = math.nan
    if not 0.0 <= temperature <= 1.0:
        raise invalid("'temperature' must be a number from 0 to 1", "temperature")
    return temperature


def _field(form: QueryDict, name: str) -> str | None:
    value = form.get(name)
    return value.strip() if isinstance(value, str) else None


def speech_task(model_id: str, specs: dict[str, ModelSpec]) -> tuple[ModelSpec, TaskSpec]:
    """The model's speech-recognition task: the one the id names, else its default, else its first; 404 for none."""
    spec, task = model_task(model_id, specs)
    if task.task == TASK:
        return spec, task
    if TaskKey.parse(model_id)[1]:
        raise NotFound(f"{model_id!r} is a {task.task} task, not a speech-recognition model; GET /models lists "
                       "the models and their tasks")
    found = next((t for t in spec.tasks.values() if t.task == TASK), None)
    if found is None:
        raise NotFound(f"model {spec.name!r} has no {TASK} task, so it cannot transcribe")
    return spec, found


def shaped(text: str, wanted: TranscriptionRequest, clip: MediaItem) -> Any:
    """The answer in the format asked."""
    if wanted.response_format == "text":
        return PlainText(text)
    if wanted.response_format == "json":
        return {"text": text}
    return {"task": "transcribe", "language": wanted.language or "", "duration": round(clip.seconds, 3),
            "text": text, "segments": [{"id": 0, "seek": 0, "start": 0.0, "end": round(clip.seconds, 3),
                                        "text": text, "tokens": [], "temperature": 0.0, "avg_logprob": 0.0,
                                        "compression_ratio": 0.0, "no_speech_prob": 0.0}]}


class TranscriptionRoute:
    """POST /v1/audio/transcriptions: one audio file, one item of the model's speech-recognition batches."""

    label = "v1-audio"

    def read(self, call: ApiCall, path: dict[str, str]) -> tuple[str, TranscriptionRequest]:
        """The form, and the model it names."""
        wanted = read_form(call.body, call.content_type_header)
        return TaskKey.parse(wanted.model)[0], wanted

    def resolve(self, wanted: TranscriptionRequest, specs: dict[str, ModelSpec]) -> tuple[ModelSpec, TaskSpec]:
        """The model's speech-recognition task."""
        return speech_task(wanted.model, specs)

    async def prepare(self, call: ApiCall, wanted: TranscriptionRequest, spec: ModelSpec, task: TaskSpec) -> Work:
        """The file checked as an audio body is on the HF route, its answer shaped as OpenAI's."""
        clip = envelope.probe(wanted.audio, media_requests.media_kind(TASK) or "audio", "file",
                              conf.MAX_IMAGE_PIXELS, conf.MAX_AUDIO_SECONDS)
        media_counts.count(spec.name, task.name, [clip])

        def shape(result: InferenceResult) -> Any:
            output = result.outputs[0]
            text = output.get("text", "") if isinstance(output, dict) else str(output)
            return shaped(text, wanted, clip)

        return Work([clip.wire()], {**task.parameters, **wanted.parameters()}, 1, shape=shape)

    def error(self, error: HostingError, request_id: str) -> Answer:
        """OpenAI's error shape."""
        return openai_error_answer(error, request_id)


TRANSCRIPTIONS = TranscriptionRoute()


class Transcription(TypedDict):
    """response_format json: the text ("text" answers it as text/plain; "verbose_json" adds duration, segments)."""

    text: str


FORM = {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["file", "model"],
    "properties": {
        "file": {"type": "string", "format": "binary", "description": "the audio file (WAV, FLAC, MP3, OGG...)"},
        "model": {"type": "string", "minLength": 1, "description": "a model with an automatic-speech-recognition task"},
        "response_format": {"enum": list(FORMATS), "default": "json"},
        "language": {"type": "string", "pattern": "^[A-Za-z]{2,3}$",
                     "description": "the audio's language, ISO-639-1 (Whisper models; CTC models ignore it); echoed "
                                    "in verbose_json"},
        "prompt": {"type": "string", "description": "accepted, not used"},
        "temperature": {"type": "number", "minimum": 0, "maximum": 1,
                        "description": "sampling temperature, 0 greedy (Whisper models; CTC models ignore it)"},
    },
}}}}


def operation(operation_class: Any, errors: tuple[int, ...]) -> Any:
    """The route as api.openapi.openapi's Operation (its class passed in, as batch_schemas does)."""
    return operation_class("openai-audio-transcriptions", "post", "OpenAI-compatible speech to text over an "
                           "automatic-speech-recognition task, batched with the task's other requests.",
                           Transcription, errors, tags=("openai",),
                           openai=True, timings=True, extra=(("requestBody", FORM),))
