"""The Hugging Face Inference API route: POST /models/<name>[/<task>] with {"inputs", "parameters", "options"}."""

from __future__ import annotations

from typing import Any

from models_registry.api.pipeline import model_lookup
from models_registry.core import paths
from models_registry.api.hf import dimensions, media_requests, payloads, tgi_stream
from models_registry.api.pipeline.answer import Answer
from models_registry.api.pipeline.call import ApiCall
from models_registry.api.pipeline.error_answers import error_answer
from models_registry.api.pipeline.inference_route import Work
from models_registry.broker.handoff import InferenceResult
from models_registry.catalog import sparse_answer
from models_registry.core.conf import conf
from models_registry.core.errors import HostingError, InvalidInput
from models_registry.policy import priority
from models_registry.catalog.specs import ModelSpec, TaskSpec


class HfRoute:
    """The model and task come from the path; the body is read by the task's kind (text, image, audio)."""

    label = "hf"

    def read(self, call: ApiCall, path: dict[str, str]) -> tuple[str, tuple[str, str | None]]:
        """The model named in the path (the body waits for the task)."""
        return path["name"], (path["name"], path.get("task"))

    def resolve(self, wanted: tuple[str, str | None], specs: dict[str, ModelSpec]) -> tuple[ModelSpec, TaskSpec]:
        """The path's model and task."""
        return model_lookup.model_and_task(*wanted, specs, paths.shown_path("model-list"))

    async def prepare(self, call: ApiCall, wanted: Any, spec: ModelSpec, task: TaskSpec) -> Work:
        """The body read for the task: media files or JSON; TGI's stream and details; embedding dimensions."""
        if media_requests.media_kind(task.task):  # the file as the body, or base64 / data URIs in JSON
            body, parsed = await media_requests.read(call.body, call.content_type, spec.name, task)
            stream, tgi_options = False, {}
        else:
            body = payloads.parse_body(call.body, call.content_type, conf.MAX_BODY_BYTES)
            body, stream, tgi_options = tgi_stream.split(body, task.task)
            parsed = payloads.read_request(body, task.task, task.parameters, conf.MAX_INPUTS)
        asked = asked_priority(call.priority, body)
        if stream:
            return Work(parsed.inputs, parsed.parameters, 1, asked, streaming=tgi_stream.streaming(parsed, tgi_options))
        parameters = {**parsed.parameters, **tgi_options}
        shorten = _identity
        sparse_answer.check_parameters(task, parameters)
        if task.task == "feature-extraction" and not sparse_answer.is_sparse_task(task):  # a sparse one has no dims
            wanted_dims = dimensions.requested(parameters)
            dims_key = (spec.name, task.name, spec.load_key())
            dimensions.check(wanted_dims, task, dimensions.known_native(dims_key))
            parameters = dimensions.without_keys(parameters)
            normalize = dimensions.effective_normalize(task, parsed.parameters)

            def shorten(outputs: list[Any]) -> list[Any]:
                return dimensions.shorten(outputs, wanted_dims, task, dims_key, normalize)

        def shape(result: InferenceResult) -> Any:
            return payloads.shape_response(task.task, shorten(result.outputs), parsed.is_batch)

        return Work(parsed.inputs, parameters, len(parsed.inputs), asked, shape, cache_wanted(body))

    def error(self, error: HostingError, request_id: str) -> Answer:
        """The API's one error shape."""
        return error_answer(error, request_id)


def asked_priority(header: str | None, body: Any) -> str | None:
    """The class a request asks for: its X-Priority header, else HF's options.priority (policy.priority decides)."""
    if header and header.strip():
        return header
    options = body.get("options") if isinstance(body, dict) else None
    value = options.get("priority") if isinstance(options, dict) else None
    if value is not None and not isinstance(value, str):
        raise InvalidInput(f"options.priority must be {' or '.join(priority.CLASSES)}")
    return value


def cache_wanted(body: Any) -> bool:
    """False when the request asks for a fresh computation (HF's options.use_cache: false)."""
    options = body.get("options") if isinstance(body, dict) else None
    return not (isinstance(options, dict) and options.get("use_cache") is False)


def _identity(outputs: list[Any]) -> list[Any]:
    return outputs


ROUTE = HfRoute()
