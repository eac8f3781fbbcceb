"""One sample request through the real path (admission, the channel layer, a live worker), for the admin's
"Run a test input" action: (ok, a one-line message with the timings and a preview of the answer)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

from asgiref.sync import async_to_sync

from models_registry.api import answer, payloads
from models_registry.broker import handoff
from models_registry.core.conf import conf
from models_registry.core.errors import HostingError
from models_registry.core.model_state import ModelState
from models_registry.core.task_key import TaskKey
from models_registry.media import envelope, samples
from models_registry.models import ModelTask
from models_registry.catalog.rollout import wire_name
from models_registry.tasks.task_inputs import TASK_KINDS

SAMPLE_SENTENCE = "The quick brown fox jumps over the lazy dog."
SAMPLE_INPUTS = {"text-classification": "I really enjoyed this film, it was wonderful."}
TEST_TIMEOUT_S = 30.0
SHOWN_CHARS = 300


def _mask_token(source: str) -> str:
    """The mask token of a local model directory's tokenizer, else BERT's [MASK]."""
    try:
        token = json.loads((Path(source).expanduser() / "tokenizer_config.json").read_text()).get("mask_token")
    except (OSError, ValueError, AttributeError):
        return "[MASK]"
    if isinstance(token, dict):
        token = token.get("content")
    return token if isinstance(token, str) and token else "[MASK]"


def sample_input(task: ModelTask) -> str:
    """A sentence the task's pipeline accepts (fill-mask gets one with the mask token)."""
    if task.task == "fill-mask":
        return f"Paris is the {_mask_token(task.model.source)} of France."
    return SAMPLE_INPUTS.get(task.task, SAMPLE_SENTENCE)


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


def _preview(output: Any) -> str:
    """The output as short JSON: floats to 4 places, a vector introduced by its length."""
    output = json.loads(answer.dump_json(output))  # vectors arrive as float32 arrays
    text = json.dumps(_rounded(output))
    if isinstance(output, list) and output and all(isinstance(v, float) for v in output):
        text = f"{len(output)} floats {text}"
    if len(text) > SHOWN_CHARS:
        text = text[:SHOWN_CHARS] + f"… ({len(text)} characters)"
    return text


def _media_input(task: ModelTask, upload: bytes | None) -> dict[str, Any] | None:
    """A media task's input: the uploaded file (its header checked as the API does), else a sample; None for text."""
    kind = TASK_KINDS[task.task].media if task.task in TASK_KINDS else None
    if kind is None:
        return None
    data = upload if upload is not None else samples.sample_image() if kind == "image" else samples.sample_clip()
    return envelope.probe(data, kind, "the file", conf.MAX_IMAGE_PIXELS,
                          conf.MAX_AUDIO_SECONDS).wire()


def run_test_input(task: ModelTask, state: str, upload: bytes | None = None) -> tuple[bool, str]:
    """Send the task a sample input (or an uploaded file) through the channel layer and a live worker: (ok, message).

    upload: a file for a media task, UTF-8 text for a text task.
    """
    label = str(TaskKey(task.model.name, task.name))
    if not task.model.enabled:
        return False, f"{label}: the model is disabled; enable it first."
    if state != ModelState.READY:
        return False, f"{label}: no live worker has this model ready (state: {state})."
    started = time.perf_counter()
    try:
        media = _media_input(task, upload)
        text = (sample_input(task) if upload is None else upload.decode("utf-8", "replace")) if media is None else ""
        parsed = payloads.read_request({"inputs": text or "x"}, task.task, dict(task.parameters or {}), 1)
        if media is not None:  # the parameters checked as for JSON; the input is the file
            parsed = payloads.InferenceRequest(inputs=[media], is_batch=False, parameters=parsed.parameters)
            text = f"the {media['media']} file ({len(media['data'])} bytes)"
        result = async_to_sync(handoff.infer)(
            request_id=f"admin-test-{uuid.uuid4().hex[:12]}", model=wire_name(task.model.name, task.model.live_version),
            task=task.name,
            inputs=parsed.inputs, parameters=parsed.parameters, timeout_s=min(task.timeout_s, TEST_TIMEOUT_S),
            max_queue_size=task.max_queue_size,
        )
        output = _preview(payloads.shape_response(task.task, result.outputs, parsed.is_batch))
    except HostingError as error:
        return False, f"{label}: {error.error_type}: {error.message}"
    except Exception as error:  # the operator sees what broke; the trace is not theirs to read
        return False, f"{label}: {type(error).__name__}: {error}"
    total_ms = (time.perf_counter() - started) * 1000
    return True, (
        f"{label} answered {text!r} in {total_ms:.1f} ms (queue {result.queue_ms:.1f} ms, compute "
        f"{result.compute_ms:.1f} ms, batch of {result.batch_size}): {output}"
    )
