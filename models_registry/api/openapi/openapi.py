"""The OpenAPI 3.1 document (GET /api/openapi.json), generated from the shapes the views validate with.

Every body and answer is a pydantic shape (api.shapes.request_schemas, api.shapes.response_schemas,
tasks.task_parameters); this module only says which route takes and answers which
(`operations`). Adding a route: its shapes in those modules, one `Operation` in
`operations()`; its error statuses come from core.errors. Called with an API token, the
document also describes each model the token may use at its own path
(api.openapi.openapi_per_model), with that task's exact parameters: what the document allows there
is what the server accepts.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Annotated, Any, Union

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from pydantic import Field, TypeAdapter
from pydantic.json_schema import GenerateJsonSchema

from models_registry.api.openai import batch_schemas, generation_schemas, responses_schemas
from models_registry.api.openapi import openapi_per_model
from models_registry.api.shapes import request_schemas, response_schemas
from models_registry.api.tei import sparse_route
from models_registry.api.openai import transcriptions, usage_route
from models_registry.api.server.django_views import api_view
from models_registry.core import paths
from models_registry.core.conf import conf
from models_registry.core.errors import ERROR_CLASSES, Conflict, HostingError
from models_registry.policy import auth
from models_registry.catalog import lookups
from models_registry.tasks.shape_errors import adapter
from models_registry.tasks.task_inputs import SUPPORTED_TASKS

JSON = "application/json"
REF = "#/components/schemas/{model}"
DEMO_MODEL = "all-minilm-l6-v2"  # what `make run` registers
STRING, INTEGER, NUMBER = ({"type": t} for t in ("string", "integer", "number"))
HEADERS: dict[str, Any] = {
    "RequestId": {"description": "The client's X-Request-Id when it sent a sane one, else a new id.",
                  "required": True, "schema": STRING},
    "RetryAfter": {"description": "Seconds to wait before retrying.", "schema": INTEGER},
    "Allow": {"description": "The methods this path takes.", "required": True, "schema": STRING},
    "RateLimitLimit": {"description": "The token's limit closest to being spent (requests or input tokens).",
                       "schema": INTEGER},
    "RateLimitRemaining": {"description": "What is left of that limit in its window.", "schema": INTEGER},
    "RateLimitReset": {"description": "Seconds until that window starts again.", "schema": INTEGER},
    "QueueTime": {"description": "Milliseconds the request waited for a batch.", "required": True, "schema": NUMBER},
    "InferenceTime": {"description": "Milliseconds its batch computed.", "required": True, "schema": NUMBER},
    "BatchSize": {"description": "Items in the batch that computed it.", "required": True, "schema": INTEGER},
}
TIMINGS = {"X-Queue-Time-Ms": "QueueTime", "X-Inference-Time-Ms": "InferenceTime", "X-Batch-Size": "BatchSize"}
ERROR_HEADERS = {
    405: {"Allow": "Allow"},
    429: {"Retry-After": "RetryAfter", "X-RateLimit-Limit": "RateLimitLimit",
          "X-RateLimit-Remaining": "RateLimitRemaining", "X-RateLimit-Reset": "RateLimitReset"},
    503: {"Retry-After": "RetryAfter"},
}


def errors_by_status() -> dict[int, tuple[tuple[str, ...], str]]:
    """status -> (error_type values, when), from the one error hierarchy of core.errors."""
    table: dict[int, list[type[HostingError]]] = {}
    for cls in ERROR_CLASSES.values():
        table.setdefault(cls.status, []).append(cls)
    return {status: (tuple(c.error_type for c in classes),
                     " ".join(f"`{c.error_type}`: {c.__doc__}" if len(classes) > 1 else str(c.__doc__)
                              for c in classes))
            for status, classes in sorted(table.items())}


def inference_errors() -> tuple[int, ...]:
    """The statuses an inference route may answer besides 200."""
    return tuple(status for status in errors_by_status() if status >= 400 and status != Conflict.status)  # 409: files


EVENT_STREAM = "text/event-stream"
STREAM_EVENTS = ('With "stream": true (text-generation, text2text-generation): one `data: {"index", "token": '
                 '{"id", "text", "logprob", "special"}, "generated_text", "details"}` event per token; the last '
                 'carries generated_text (and details when asked); an error after the first byte is a last '
                 '`data: {"error", "error_type"}` event.')


@dataclass(frozen=True)
class Operation:
    """One documented route: the shape it takes, the shape it answers, and its error statuses."""

    route: str  # its name in the path table (core.paths.ROUTES)
    method: str
    summary: str
    answer: Any  # a response shape, or a plain JSON schema for non-JSON media
    errors: tuple[int, ...] = ()
    body: Any = None  # a request shape
    tags: tuple[str, ...] = ()
    public: bool = False  # no token needed
    openai: bool = False  # errors in OpenAI's shape
    text_body: bool = False  # also takes a text/plain body: one string input
    timings: bool = False  # the 200 carries X-Queue-Time-Ms, X-Inference-Time-Ms, X-Batch-Size
    streams: bool = False  # generation tasks may answer text/event-stream ("stream": true)
    media: str = JSON
    parameters: tuple[dict[str, Any], ...] = ()
    description: str = ""
    example: Any = None
    extra: tuple[tuple[str, Any], ...] = ()  # more keys of the operation object

    @property
    def path(self) -> str:
        """The route's path as the document writes it (`/models/{name}`)."""
        return paths.openapi_path(self.route)


def path_name(example: str = DEMO_MODEL) -> dict[str, Any]:
    """The {name} path parameter: a registered model."""
    return {"name": "name", "in": "path", "required": True, "description": "a registered model (GET /models)",
            "schema": {"type": "string", "pattern": "^[-a-zA-Z0-9_]+$"}, "example": example}


PATH_TASK = {"name": "task", "in": "path", "required": True, "description": "one of the model's tasks",
             "schema": {"type": "string", "pattern": "^[-a-zA-Z0-9_]+$"}, "example": "feature-extraction"}


def any_task_request(max_inputs: int) -> Any:
    """The body of the generic inference paths: what some task takes (the model's task decides)."""
    shapes = tuple(request_schemas.inference_request(task, max_inputs) for task in SUPPORTED_TASKS)
    union = Union[shapes]  # noqa: UP007 - a union of a runtime tuple of types
    return Annotated[union, Field(description="The Hugging Face Inference API request of the model's task; "
                                            "GET /api/openapi.json with a token describes each model.")]


def operations(max_inputs: int) -> list[Operation]:
    """Every route of the API, as the document shows it."""
    r, errors = response_schemas, inference_errors()
    listing = tuple(s for s in (401, 405, 500) if s in errors_by_status())
    inference = {"answer": r.InferenceResponse, "errors": errors, "body": any_task_request(max_inputs),
                 "tags": ("inference",), "text_body": True, "timings": True, "streams": True,
                 "description": "A `text/plain` body (or curl -d text) is one string input."}
    return [
        Operation("model-list", "get", "Registered models with their tasks and live state.", r.ModelList, listing,
                  tags=("models",)),
        Operation("model", "get", "One model with its tasks' settings and live queue depth.", r.ModelDetail,
                  (401, 403, 404, 405, 500), tags=("models",), parameters=(path_name(),)),
        Operation("model", "post", "Inference on the model's default task.", parameters=(path_name(),),
                  **inference),
        Operation("model-task", "post", "Inference on a named task of the model.",
                  parameters=(path_name(), PATH_TASK), **inference),
        Operation("openai-embeddings", "post", "OpenAI-compatible embeddings (feature-extraction tasks).",
                  r.EmbeddingResponse, errors, request_schemas.embedding_request(max_inputs), ("openai",),
                  openai=True, timings=True, example={"model": DEMO_MODEL, "input": "hello"}),
        *generation_schemas.operations(Operation, errors),
        *responses_schemas.operations(Operation, errors),
        Operation("openai-models", "get", "OpenAI-compatible list of the embedding and text-generation model ids this "
                  "token may use.", r.OpenAIModelList, listing, tags=("openai",), openai=True),
        Operation("tei-tokenize", "post",
                  "Text Embeddings Inference's tokenize: ids, strings and character offsets (no worker involved).",
                  r.TokenizeResponse, errors, request_schemas.tokenize_request(max_inputs), ("tei",),
                  example={"model": DEMO_MODEL, "inputs": "Hello world"}),
        Operation("tei-rerank", "post", "Text Embeddings Inference's rerank: (query, text) pairs scored in batches by "
                  "a text-ranking task, or by MaxSim of a multi-vector model's token vectors.", r.RerankResponse,
                  errors, request_schemas.rerank_request(max_inputs), ("tei",), timings=True, example={
                      "model": "my-reranker", "query": "What is Django?", "texts": ["A web framework.", "A guitarist."]}),
        sparse_route.operation(Operation, errors, max_inputs),
        Operation("health", "get", "Liveness of this web process (never waits on a worker).", r.Health, (405,),
                  tags=("operations",), public=True),
        Operation("ready", "get", "Readiness: database, broker, and every model the live workers are meant to serve.",
                  r.Readiness, (405, 500), tags=("operations",), public=True),
        Operation("metrics", "get", "Prometheus metrics: open, or behind HOSTING_METRICS_TOKEN when the operator "
                  "sets one.", STRING, (401,), tags=("operations",), media="text/plain",
                  extra=(("security", [{}, {"metricsToken": []}]),)),
        Operation("openapi-schema", "get", "This document; with an API token, also each model the token may "
                  "use at its own path.", {"type": "object"}, (405,), tags=("operations",), public=True),
        Operation("openapi-docs", "get", "Browsable docs of this document (served offline).", STRING, (405,),
                  tags=("operations",), public=True, media="text/html"),
        *batch_schemas.operations(Operation),
        usage_route.operation(Operation),
        transcriptions.operation(Operation, errors),
    ]


class _Untitled(GenerateJsonSchema):
    """JSON schemas without a title on every property (the key says it)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def schemas_of(shapes: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(key -> schema or $ref, named schemas) for the shapes, named schemas under components/schemas."""
    keyed = [(key, "validation", adapter(shape)) for key, shape in shapes.items()]
    mapping, defs = TypeAdapter.json_schemas(keyed, ref_template=REF, schema_generator=_Untitled)
    return {key: mapping[(key, "validation")] for key in shapes}, defs.get("$defs", {})


def _headers(named: dict[str, str]) -> dict[str, Any]:
    return {h: {"$ref": f"#/components/headers/{c}"} for h, c in {"X-Request-Id": "RequestId", **named}.items()}


def error_responses() -> dict[str, Any]:
    """components/responses: each error status in SPEC's shape (ErrorNNN) and OpenAI's (OpenAIErrorNNN)."""
    out: dict[str, Any] = {}
    for status, (kinds, when) in errors_by_status().items():
        for prefix in ("Error", "OpenAIError"):
            narrowed = {"properties": {"error_type": {"enum": list(kinds)}}}
            out[f"{prefix}{status}"] = {
                "description": when, "headers": _headers(ERROR_HEADERS.get(status, {})),
                "content": {JSON: {"schema": {"allOf": [{"$ref": REF.format(model=prefix)}, narrowed]}}}}
    return out


BINARY = {"type": "string", "format": "binary"}


def media_bodies(kinds: tuple[str, ...]) -> dict[str, Any]:
    """The raw-file request bodies of the media tasks (as InferenceClient sends a file with no parameters)."""
    described = {**BINARY, "description": "the file itself (media tasks): its parameters are the task's defaults"}
    return {**{f"{kind}/*": {"schema": described} for kind in kinds}, "application/octet-stream": {"schema": described}}


def operation_object(op: Operation, answer: Any, body: Any) -> dict[str, Any]:
    """The OpenAPI operation for op, its answer and body schemas already generated."""
    prefix = "OpenAIError" if op.openai else "Error"
    ok = {"description": op.summary, "headers": _headers(TIMINGS if op.timings else {}),
          "content": {op.media: {"schema": answer}}}
    if op.streams:
        ok["content"][EVENT_STREAM] = {"schema": {**STRING, "description": STREAM_EVENTS}}
    responses = {"200": ok, **{str(s): {"$ref": f"#/components/responses/{prefix}{s}"} for s in op.errors}}
    if op.route == "ready":  # not ready is a 503 with the same report, not an error
        responses["503"] = {"description": "Not ready: `missing` says what.", "headers": _headers({}),
                            "content": {JSON: {"schema": answer}}}
    out: dict[str, Any] = {"summary": op.summary, "tags": list(op.tags), "responses": responses, **dict(op.extra)}
    if op.description:
        out["description"] = op.description
    if op.public:
        out["security"] = []
    if op.parameters:
        out["parameters"] = [dict(p) for p in op.parameters]
    if body is not None:
        content: dict[str, Any] = {JSON: {"schema": body}}
        if op.example is not None:
            content[JSON]["example"] = op.example
        if op.text_body:
            content["text/plain"] = {"schema": STRING, "example": "Paris is the [MASK] of France."}
            content.update(media_bodies(("image", "audio")))
        out["requestBody"] = {"required": True, "content": content}
    return out


@functools.cache
def build_schema(max_inputs: int) -> dict[str, Any]:
    """The document every caller gets (it names no registered model)."""
    ops = operations(max_inputs)
    shapes = {f"{op.method} {op.path} answer": op.answer for op in ops if not isinstance(op.answer, dict)}
    shapes |= {f"{op.method} {op.path} body": op.body for op in ops if op.body is not None}
    shapes |= {"Error": response_schemas.Error, "OpenAIError": response_schemas.OpenAIError}
    generated, named = schemas_of(shapes)
    paths: dict[str, Any] = {}
    for op in ops:
        answer = generated.get(f"{op.method} {op.path} answer", op.answer)
        body = generated.get(f"{op.method} {op.path} body")
        paths.setdefault(op.path, {})[op.method] = operation_object(op, answer, body)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Model hosting API", "version": "1",
                 "description": "Hugging Face Inference API and OpenAI-compatible inference on registered models. "
                                "Errors: {\"error\": message, \"error_type\": kind}; on /v1 OpenAI's "
                                "{\"error\": {\"message\", \"type\", \"param\", \"code\"}}. With an API token this "
                                "document also describes each model the token may use at its own path."},
        "servers": [{"url": "/"}],
        "security": [{"bearerAuth": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "bearerAuth": {"type": "http", "scheme": "bearer",
                               "description": "An API token from `manage.py create_api_token`."},
                "metricsToken": {"type": "http", "scheme": "bearer",
                                 "description": "HOSTING_METRICS_TOKEN, when set (not an API token)."},
            },
            "schemas": named,
            "responses": error_responses(),
            "headers": HEADERS,
        },
    }


@api_view("GET")
async def schema_view(request: HttpRequest) -> HttpResponse:
    """GET /api/openapi.json: public; with a valid token, also the models that token may use."""
    document = build_schema(conf.MAX_INPUTS)
    header = request.headers.get("Authorization")
    if header or not conf.REQUIRE_API_TOKEN:
        try:
            grant = await auth.authorize(header, None)
        except HostingError:
            return JsonResponse(document)  # a bad token still gets the public document
        specs = await lookups.get_specs()
        visible = {name: spec for name, spec in specs.items() if grant is None or grant.allows(name)}
        document = openapi_per_model.with_models(document, visible, conf.MAX_INPUTS)
    return JsonResponse(document)


@api_view("GET")
async def docs_view(request: HttpRequest) -> HttpResponse:
    """GET /api/docs: Swagger UI from the app's static files (no CDN)."""
    return HttpResponse(render_to_string("models_registry/api_docs.html", request=request))
