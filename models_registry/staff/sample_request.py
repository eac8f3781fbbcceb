"""One sample request for the admin's "Run a test input" action and upload form, through the skeleton every
inference route uses (inference_route.serve on the HF route): the same version choice, serving check, admission,
metrics and log line as an API request. (ok, a one-line message with the timings and a preview of the answer)."""

from __future__ import annotations

import base64
import dataclasses
import json
import time
import uuid
from pathlib import Path
from typing import Any

from asgiref.sync import async_to_sync

from models_registry.api.pipeline import answer, inference_route
from models_registry.api.hf import hf_route
from models_registry.api.pipeline.call import ApiCall
from models_registry.core import paths
from models_registry.core.model_state import ModelState
from models_registry.core.task_key import TaskKey
from models_registry.media import samples
from models_registry.models import ModelTask
from models_registry.policy.serving import VERSION_HEADER
from models_registry.catalog.specs import ModelSpec, TaskSpec
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
    """The output (the answer's JSON, decoded) as short JSON: floats to 4 places, a vector introduced by its length."""
    text = json.dumps(_rounded(output))
    if isinstance(output, list) and output and all(isinstance(v, float) for v in output):
        text = f"{len(output)} floats {text}"
    if len(text) > SHOWN_CHARS:
        text = text[:SHOWN_CHARS] + f"… ({len(text)} characters)"
    return text


class _SampleRoute(hf_route.HfRoute):
    """The HF route, the task's timeout capped at TEST_TIMEOUT_S: the operator waits on the admin page."""

    def resolve(self, wanted: tuple[str, str | None], specs: dict[str, ModelSpec]) -> tuple[ModelSpec, TaskSpec]:
        spec, task = super().resolve(wanted, specs)
        return spec, dataclasses.replace(task, timeout_s=min(task.timeout_s, TEST_TIMEOUT_S))


_ROUTE = _SampleRoute()


def _request(task: ModelTask, upload: bytes | None) -> tuple[dict[str, Any], str]:
    """The HF request body (computed afresh: options.use_cache false) and what it sends, as the message names it.

    A media task gets the uploaded file (else a sample) base64-encoded, as media_requests.read takes it from
    JSON; a text task the uploaded UTF-8 text, else a sample sentence.
    """
    options = {"use_cache": False}  # the worker answers, not the response cache
    kind = TASK_KINDS[task.task].media if task.task in TASK_KINDS else None
    if kind is None:
        text = sample_input(task) if upload is None else upload.decode("utf-8", "replace")
        return {"inputs": text, "options": options}, repr(text)
    data = upload if upload is not None else samples.sample_image() if kind == "image" else samples.sample_clip()
    return ({"inputs": base64.b64encode(data).decode("ascii"), "options": options},
            f"the {kind} file ({len(data)} bytes)")


def _ms(headers: dict[str, str], name: str) -> float:
    return float(headers.get(name) or 0.0)


def run_test_input(task: ModelTask, state: str, upload: bytes | None = None) -> tuple[bool, str]:
    """Send the task a sample input (or an uploaded file) as an API request would go: (ok, message).

    upload: a file for a media task, UTF-8 text for a text task. The call is a staff user's (no API token, no
    rate limit: ApiCall.staff), whatever HOSTING_REQUIRE_API_TOKEN says.
    """
    label = str(TaskKey(task.model.name, task.name))
    if not task.model.enabled:
        return False, f"{label}: the model is disabled; enable it first."
    if state != ModelState.READY:
        return False, f"{label}: no live worker has this model ready (state: {state})."
    body, sent = _request(task, upload)
    call = ApiCall(request_id=f"admin-test-{uuid.uuid4().hex[:12]}", method="POST",
                   path=paths.url_path("model-task", name=task.model.name, task=task.name), body=json.dumps(body).encode(),
                   content_type=answer.JSON, staff=True)
    started = time.perf_counter()
    reply = async_to_sync(inference_route.serve)(_ROUTE, call, {"name": task.model.name, "task": task.name})
    total_ms = (time.perf_counter() - started) * 1000
    data = json.loads(reply.body)  # the route answers JSON, errors included (inference_route.serve)
    if reply.status != 200:
        return False, f"{label}: {data.get('error_type')}: {data.get('error')}"
    headers = reply.headers
    version = headers.get(VERSION_HEADER)
    return True, (
        f"{label} answered {sent} in {total_ms:.1f} ms ("
        + (f"version {version}, " if version else "")
        + f"queue {_ms(headers, 'X-Queue-Time-Ms'):.1f} ms, compute {_ms(headers, 'X-Inference-Time-Ms'):.1f} ms, "
        f"batch of {headers.get('X-Batch-Size', '?')}): {_preview(data)}"
    )
