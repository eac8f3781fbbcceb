"""OpenAI-compatible routes: POST /v1/embeddings and GET /v1/models (embedding and generation ids).

Errors here use OpenAI's shape, {"error": {"message", "type", "param", "code"}}, plus our
`error_type` at the top level: the openai SDK reads `error.message` into the exception
text and `error.code`/`error.param`/`error.type` into its attributes; with our plain
{"error": "<text>"} it would raise a bare "Error code: 400" and drop the message.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from pydantic import ValidationError

from models_registry.api.hf import dimensions, payloads
from models_registry.api.openai import media_embeddings
from models_registry.api.shapes import request_schemas
from models_registry.api.pipeline import model_lookup
from models_registry.api.pipeline.answer import Answer
from models_registry.api.pipeline.call import ApiCall
from models_registry.api.pipeline.error_answers import invalid, openai_error_answer, openai_error_response
from models_registry.api.pipeline.inference_route import Work
from models_registry.api.server.django_views import AsyncView, api_view
from models_registry.broker.handoff import InferenceResult
from models_registry.core import paths
from models_registry.core.conf import conf
from models_registry.core.errors import HostingError, TooLarge
from models_registry.core.task_key import TaskKey
from models_registry.policy import auth
from models_registry.catalog import lookups, output_shape, sparse_answer
from models_registry.catalog.specs import ModelSpec, TaskSpec
from models_registry.tasks.shape_errors import keys, phrase


def openai_view(*methods: str) -> Callable[[AsyncView], AsyncView]:
    """views.api_view answering every error in OpenAI's shape."""
    return api_view(*methods, render=openai_error_response)


@dataclass(frozen=True)
class EmbeddingRequest:
    """A validated POST /v1/embeddings body."""

    model: str
    inputs: list[str]
    encoding_format: str
    dimensions: int | None
    prompt_name: str | None = None  # one of the model's prompts (sentence-transformers', Infinity's and vLLM's name)
    modality: str = "text"  # Infinity's: "image" inputs are data URIs or base64 (api.openai.media_embeddings)


def _explain_input(value: Any, max_inputs: int) -> HostingError:
    if value is None:
        return invalid("'input' is required: a string or a list of strings", "input")
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        return invalid(f"'input' must be a string or a list of strings, not {type(value).__name__}", "input")
    if not items:
        return invalid("'input' must not be an empty list", "input")
    if any(isinstance(i, list) for i in items) or all(isinstance(i, int) and not isinstance(i, bool) for i in items):
        return invalid("token-id arrays are not supported: send text, a string or a list of strings", "input")
    if len(items) > max_inputs:
        return TooLarge(f"{len(items)} inputs in one request; this server takes at most {max_inputs}")
    position, item = next((n, i) for n, i in enumerate(items) if not isinstance(i, str))
    return invalid(f"input[{position}] must be a string, not {type(item).__name__}", "input")


def _explainer(max_inputs: int) -> Callable[[Any, ValidationError], HostingError]:
    """The one error, naming OpenAI's `param`, for a body that failed request_schemas.embedding_request."""

    def explain(payload: Any, error: ValidationError) -> HostingError:
        if not isinstance(payload, dict):
            return invalid('request body must be a JSON object like {"model": "...", "input": "..."}', None)
        fields = keys(request_schemas.embedding_request(max_inputs))
        unknown = sorted(set(payload) - set(fields))
        if unknown:
            return invalid(f"unrecognized request argument(s): {', '.join(unknown)}; this server takes "
                           f"{', '.join(fields)}", unknown[0])
        where = [str(e["loc"][0]) for e in error.errors() if e["loc"]]
        if "model" in where:
            return invalid("'model' is required: a model id from GET /v1/models", "model")
        if "input" in where:
            return _explain_input(payload.get("input"), max_inputs)
        if "encoding_format" in where:
            return invalid(f"'encoding_format' must be float or base64, not {payload['encoding_format']!r}",
                           "encoding_format")
        shape = request_schemas.embedding_request(max_inputs)
        return invalid(f"{where[0]!r} must {phrase(shape, where[0])}", where[0])

    return explain


def read_embedding_request(payload: Any, max_inputs: int) -> EmbeddingRequest:
    """Validate an OpenAI embeddings body (pure: no database, no I/O)."""
    shape = request_schemas.embedding_request(max_inputs)
    body = request_schemas.validate(shape, payload, _explainer(max_inputs))
    inputs = body["input"]
    return EmbeddingRequest(model=body["model"], inputs=[inputs] if isinstance(inputs, str) else inputs,
                            encoding_format=body.get("encoding_format") or "float", dimensions=body.get("dimensions"),
                            prompt_name=body.get("prompt_name"), modality=body.get("modality") or "text")


def embedding_ids(spec: ModelSpec) -> list[str]:
    """The /v1 model ids of spec: its name for an embedding default task, name/task for the others."""
    return [spec.name if t.name == spec.default_task else str(TaskKey(spec.name, t.name))
            for t in spec.tasks.values() if _embeds(t)]


def generation_ids(spec: ModelSpec) -> list[str]:
    """The /v1 model ids of spec's text-generation tasks (chat and completions), named as embedding_ids."""
    return [spec.name if t.name == spec.default_task else str(TaskKey(spec.name, t.name))
            for t in spec.tasks.values() if t.task == "text-generation"]


def _embeds(task: TaskSpec) -> bool:
    return task.task == "feature-extraction" and task.pooling != "none" and not sparse_answer.is_sparse_task(task)


def model_task(model_id: str, specs: dict[str, ModelSpec]) -> tuple[ModelSpec, TaskSpec]:
    """The model and task a /v1 model id ("name" or "name/task") names: 404 when there is none."""
    return model_lookup.model_and_task(*TaskKey.parse(model_id), specs, paths.shown_path("openai-models"))


def _resolve(model_id: str, specs: dict[str, ModelSpec]) -> tuple[ModelSpec, TaskSpec]:
    spec, task = model_task(model_id, specs)
    if task.task != "feature-extraction":
        raise invalid(f"{model_id!r} is a {task.task} task, not an embedding model; GET /v1/models lists "
                      "the embedding ids", "model")
    if task.pooling == "none":
        raise invalid(f"{model_id!r} returns one vector per token (pooling 'none'), not one embedding", "model")
    if sparse_answer.is_sparse_task(task):
        raise invalid(f"{model_id!r} is a sparse (SPLADE) model: its vectors are vocabulary-wide weights, not OpenAI's "
                      f"dense embeddings; POST them to {paths.shown_path('tei-embed-sparse')} or "
                      f"{paths.shown_path('model')}", "model")
    return spec, task


def _embedding(index: int, output: Any, encoding: str) -> dict[str, Any]:
    if sparse_answer.is_sparse_output(output):  # its registration read no SpladePooling, the worker's load did
        raise invalid("this model answered sparse vectors: register it again so that its files are read", "model")
    data, _shape = output
    vector: Any = base64.b64encode(data).decode("ascii") if encoding == "base64" else payloads.decode_vector(output)
    return {"object": "embedding", "index": index, "embedding": vector}


def json_body(call: ApiCall) -> Any:
    """An OpenAI route's JSON body (a text or form body is refused: only JSON names the model)."""
    media = call.content_type.strip().lower()
    # The HF routes take plain text as one input; here only JSON names the model (curl -d JSON still works).
    if media == "text/plain" or (media == "application/x-www-form-urlencoded" and not call.body.lstrip().startswith(b"{")):
        raise invalid('send a JSON body (Content-Type: application/json) like {"model": "...", "input": "..."}', None)
    return payloads.parse_body(call.body, call.content_type, conf.MAX_BODY_BYTES)


class EmbeddingsRoute:
    """OpenAI's POST /v1/embeddings over a feature-extraction task: the model is named in the body."""

    label = "v1"

    def read(self, call: ApiCall, path: dict[str, str]) -> tuple[str, EmbeddingRequest]:
        """The validated body and the model it names."""
        wanted = read_embedding_request(json_body(call), conf.MAX_INPUTS)
        return TaskKey.parse(wanted.model).model, wanted

    def resolve(self, wanted: EmbeddingRequest, specs: dict[str, ModelSpec]) -> tuple[ModelSpec, TaskSpec]:
        """The embedding task the model id names (an image one for modality "image")."""
        if wanted.modality in media_embeddings.MODALITIES:
            return media_embeddings.resolve(wanted.model, wanted.modality, specs)
        return _resolve(wanted.model, specs)

    async def prepare(self, call: ApiCall, wanted: EmbeddingRequest, spec: ModelSpec, task: TaskSpec) -> Work:
        """The inputs (media items for images), the task's parameters, and OpenAI's list as the answer."""
        inputs: list[Any] = wanted.inputs
        if wanted.modality in media_embeddings.MODALITIES:
            inputs = await media_embeddings.items(wanted.inputs, wanted.modality, spec, task)
        dims_key = (spec.name, task.name, spec.load_key())
        dimensions.check(wanted.dimensions, task, dimensions.known_native(dims_key))
        parameters = dimensions.without_keys({k: v for k, v in task.parameters.items() if v is not None})
        if wanted.prompt_name is not None:
            parameters["prompt_name"] = wanted.prompt_name
        normalize = dimensions.effective_normalize(task, task.parameters)

        def shape(result: InferenceResult) -> Any:
            outputs = dimensions.shorten(result.outputs, wanted.dimensions, task, dims_key, normalize)
            return {
                "object": "list",
                "data": [_embedding(i, output, wanted.encoding_format) for i, output in enumerate(outputs)],
                "model": wanted.model,
                "usage": {"prompt_tokens": result.tokens, "total_tokens": result.tokens},
            }

        return Work(inputs, parameters, len(wanted.inputs), call.priority, shape)

    def error(self, error: HostingError, request_id: str) -> Answer:
        """OpenAI's error shape."""
        return openai_error_answer(error, request_id)


EMBEDDINGS = EmbeddingsRoute()



def _created_at() -> dict[str, int]:
    from models_registry.models import RegisteredModel

    rows = RegisteredModel.objects.values_list("name", "created_at")
    return {name: int(created.timestamp()) for name, created in rows}


@openai_view("GET")
async def list_models(request: HttpRequest) -> HttpResponse:
    """OpenAI's GET /v1/models: every enabled embedding and text-generation id this token may use."""
    grant = await auth.authorize(request.headers.get("Authorization"), None)
    specs = await lookups.get_specs()
    created = await sync_to_async(lookups.fresh_connection(_created_at))()
    data = [
        {"id": model_id, "object": "model", "created": created.get(name, 0), "owned_by": "hosting",
         **output_shape.facts(spec, model_task(model_id, specs)[1])}
        for name, spec in specs.items()
        if spec.enabled and (grant is None or grant.allows(name))
        for model_id in embedding_ids(spec) + generation_ids(spec)
    ]
    return JsonResponse({"object": "list", "data": data})
