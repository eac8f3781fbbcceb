"""The OpenAPI 3.1 document of the HTTP API (GET /api/openapi.json) and its docs page (GET /api/docs)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

from models_registry.api import openapi_tei
from models_registry.api.openapi_schemas import INTEGER, NUMBER, STRING, ref, schemas
from models_registry.api.views import api_view

JSON = "application/json"
DEMO_MODEL = "all-minilm-l6-v2"  # what `make run` registers
# status -> (error_type values, when) for the errors of SPEC's table.
ERRORS: dict[int, tuple[tuple[str, ...], str]] = {
    400: (("invalid_input",), "Malformed JSON, wrong types, or parameters the task does not take."),
    401: (("unauthorized",), "No API token, or an unknown, revoked or expired one."),
    403: (("forbidden",), "The token is not allowed to use this model."),
    404: (("not_found",), "Unknown model or task."),
    405: (("method_not_allowed",), "Another HTTP method on this path; `Allow` lists the ones it takes."),
    413: (("too_large",), "Body over HOSTING_MAX_BODY_BYTES, or more inputs than the server takes."),
    429: (("rate_limited",), "The token's rate limit or quota is spent (Retry-After and X-RateLimit-* say when)."),
    500: (("internal",), "A pipeline or server error: a message only, details in the server log."),
    503: (("overloaded", "unavailable"), ("`overloaded`: the task's queue is full (with Retry-After); `unavailable`: "
                                          "the model is disabled, loading or failed, or no worker serves it.")),
    504: (("timeout",), "No result within the task's timeout_s."),
}
INFERENCE_ERRORS = (400, 401, 403, 404, 405, 413, 429, 500, 503, 504)
HEADERS: dict[str, Any] = {
    "RequestId": {"description": "The client's X-Request-Id when it sent a sane one, else a new id.",
                  "required": True, "schema": STRING},
    "RetryAfter": {"description": "Seconds to wait before retrying (overloaded).", "schema": INTEGER},
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
RATE_LIMIT = {"X-RateLimit-Limit": "RateLimitLimit", "X-RateLimit-Remaining": "RateLimitRemaining",
              "X-RateLimit-Reset": "RateLimitReset"}


def _headers(**named: str) -> dict[str, Any]:
    refs = {"X-Request-Id": "RequestId", **named}
    return {header: {"$ref": f"#/components/headers/{component}"} for header, component in refs.items()}


def _error_response(status: int, openai: bool) -> dict[str, Any]:
    kinds, when = ERRORS[status]
    shape = ref("OpenAIError") if openai else ref("Error")
    narrowed = {"properties": {"error_type": {"enum": list(kinds)}}}
    extra = {"Retry-After": "RetryAfter"} if status == 503 else {"Allow": "Allow"} if status == 405 else {}
    if status == 429:
        extra = {"Retry-After": "RetryAfter", **RATE_LIMIT}
    return {"description": when, "headers": _headers(**extra),
            "content": {JSON: {"schema": {"allOf": [shape, narrowed]}}}}


def _response_components() -> dict[str, Any]:
    plain = {f"Error{status}": _error_response(status, False) for status in ERRORS}
    return plain | {f"OpenAIError{status}": _error_response(status, True) for status in ERRORS}


def _operation(summary: str, ok: dict[str, Any], errors: tuple[int, ...], *, openai: bool = False,
               public: bool = False, body: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    prefix = "OpenAIError" if openai else "Error"
    responses = {"200": ok, **{str(s): {"$ref": f"#/components/responses/{prefix}{s}"} for s in errors}}
    operation: dict[str, Any] = {"summary": summary, "responses": responses, **extra}
    if public:
        operation["security"] = []
    if body is not None:
        operation["requestBody"] = {"required": True, "content": body}
    return operation


def _ok(description: str, schema: dict[str, Any], media: str = JSON, timings: bool = False) -> dict[str, Any]:
    headers = _headers(**TIMINGS) if timings else _headers()
    return {"description": description, "headers": headers, "content": {media: {"schema": schema}}}


def _path_params(with_task: bool) -> list[dict[str, Any]]:
    slug = {"type": "string", "pattern": "^[-a-zA-Z0-9_]+$"}
    params = [{"name": "name", "in": "path", "required": True, "description": "a registered model (GET /models)",
               "schema": slug, "example": DEMO_MODEL}]
    if with_task:
        params.append({"name": "task", "in": "path", "required": True, "description": "one of the model's tasks",
                       "schema": slug, "example": "feature-extraction"})
    return params


def _inference(summary: str, with_task: bool) -> dict[str, Any]:
    body = {
        JSON: {"schema": ref("InferenceRequest"), "examples": {
            "one": {"value": {"inputs": "Paris is the [MASK] of France."}},
            "batch": {"value": {"inputs": ["I love it", "I hate it"], "parameters": {"top_k": 2}}},
        }},
        "text/plain": {"schema": STRING, "example": "Paris is the [MASK] of France."},
    }
    ok = _ok("The task's output (Hugging Face Inference API shape).", ref("InferenceResponse"), timings=True)
    return _operation(summary, ok, INFERENCE_ERRORS, body=body, tags=["inference"],
                      parameters=_path_params(with_task),
                      description="A `text/plain` body (or curl -d text) is one string input.")


def build_schema(max_inputs: int) -> dict[str, Any]:
    """The OpenAPI document (the same for every caller: it names no registered model)."""
    detail = _operation("One model with its tasks' settings and live queue depth.",
                        _ok("The model.", ref("ModelDetail")), (401, 403, 404, 405, 500), tags=["models"],
                        parameters=_path_params(False))
    ready = _operation("Readiness: database, broker, and a live worker serving an enabled model.",
                       _ok("Ready.", ref("Readiness")), (405, 500), public=True, tags=["operations"])
    ready["responses"]["503"] = {"description": "Not ready: `missing` says what.", "headers": _headers(),
                                 "content": {JSON: {"schema": ref("Readiness")}}}
    embeddings_body = {JSON: {"schema": ref("EmbeddingRequest"),
                              "example": {"model": DEMO_MODEL, "input": "hello"}}}
    paths = {
        "/models": {"get": _operation("Registered models with their tasks and live state.",
                                      _ok("The models.", ref("ModelList")), (401, 405, 500), tags=["models"])},
        "/models/{name}": {
            "get": detail,
            "post": _inference("Inference on the model's default task.", False),
        },
        "/models/{name}/{task}": {
            "post": _inference("Inference on a named task of the model.", True),
        },
        "/v1/embeddings": {"post": _operation(
            "OpenAI-compatible embeddings (feature-extraction tasks).",
            _ok("The embeddings, in input order.", ref("EmbeddingResponse"), timings=True),
            INFERENCE_ERRORS, openai=True, body=embeddings_body, tags=["openai"])},
        "/v1/models": {"get": _operation("OpenAI-compatible list of the embedding model ids this token may use.",
                                         _ok("The model ids.", ref("OpenAIModelList")), (401, 405, 500),
                                         openai=True, tags=["openai"])},
        **openapi_tei.paths(_operation, _ok, INFERENCE_ERRORS),
        "/health": {"get": _operation("Liveness of this web process (never waits on a worker).",
                                      _ok("Alive.", ref("Health")), (405,), public=True, tags=["operations"])},
        "/ready": {"get": ready},
        "/metrics": {"get": _operation(
            "Prometheus metrics: open, or behind HOSTING_METRICS_TOKEN when the operator sets one.",
            _ok("Prometheus text format.", STRING, media="text/plain"), (401,), tags=["operations"],
            security=[{}, {"metricsToken": []}])},
        "/api/openapi.json": {"get": _operation("This document.", _ok("OpenAPI 3.1.", {"type": "object"}), (405,),
                                                public=True, tags=["operations"])},
        "/api/docs": {"get": _operation("Browsable docs of this document (served offline).",
                                        _ok("An HTML page.", STRING, media="text/html"), (405,), public=True,
                                        tags=["operations"])},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "Model hosting API", "version": "1",
                 "description": "Hugging Face Inference API and OpenAI-compatible inference on registered models. "
                                "Errors: {\"error\": message, \"error_type\": kind}; on /v1 OpenAI's "
                                "{\"error\": {\"message\", \"type\", \"param\", \"code\"}}."},
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
            "schemas": schemas(max_inputs) | openapi_tei.schemas(max_inputs),
            "responses": _response_components(),
            "headers": HEADERS,
        },
    }


@api_view("GET")
async def schema_view(request: HttpRequest) -> HttpResponse:
    """GET /api/openapi.json: the document (public, like /health: it names no model)."""
    return JsonResponse(build_schema(settings.HOSTING_MAX_INPUTS))


@api_view("GET")
async def docs_view(request: HttpRequest) -> HttpResponse:
    """GET /api/docs: Swagger UI from the app's static files (no CDN)."""
    return HttpResponse(render_to_string("models_registry/api_docs.html", request=request))
