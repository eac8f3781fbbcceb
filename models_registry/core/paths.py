"""The app's path table: every path it serves, spelled once, and which of them the API's front door serves.

ROUTES is the one place a path is written. Django's URLconf (models_registry/urls.py) is
made from it, the OpenAPI document's paths (api.openapi.openapi) are written from it, and every
matcher reads the names below: the ASGI router (models_registry.asgi), the front door's
route table (api.server.route_table), the refusal before the body (api.server.before_body) and
batch-job lines (jobs.lines). tests/unit/test_house.py fails on a path spelled anywhere else.
"""

from __future__ import annotations

import re

# URL name -> Django route (path() syntax, no leading slash). A model or task name is a slug.
ROUTES: dict[str, str] = {
    "model-list": "models",
    "model": "models/<slug:name>",
    "model-task": "models/<slug:name>/<slug:task>",
    "openai-embeddings": "v1/embeddings",
    "openai-models": "v1/models",
    "openai-chat-completions": "v1/chat/completions",
    "openai-completions": "v1/completions",
    "openai-responses": "v1/responses",
    "openai-response": "v1/responses/<str:response_id>",  # a stored response (GET, DELETE)
    "openai-audio-transcriptions": "v1/audio/transcriptions",
    "openai-files": "v1/files",
    "openai-file": "v1/files/<str:file_id>",
    "openai-file-content": "v1/files/<str:file_id>/content",
    "openai-batches": "v1/batches",
    "openai-batch": "v1/batches/<str:batch_id>",
    "openai-batch-cancel": "v1/batches/<str:batch_id>/cancel",
    "openai-usage": "v1/usage",  # the calling token's usage ledger (GET)
    "tei-tokenize": "tokenize",
    "tei-rerank": "rerank",
    "tei-embed-sparse": "embed_sparse",
    "health": "health",
    "ready": "ready",
    "openapi-schema": "api/openapi.json",
    "openapi-docs": "api/docs",
    "dashboard": "dashboard/",
    "dashboard-data": "dashboard/data.json",
    "metrics": "metrics",
}
PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>")  # a Django route's <converter:name>
NAME = r"[-a-zA-Z0-9_]+"  # what Django's slug converter matches: a model or task name


def url_path(route: str, /, **values: str) -> str:
    """The path of a route (by its name), its parameters filled in from values (`/models/minilm`)."""
    return "/" + PARAMETER.sub(lambda found: values[found[1]], ROUTES[route])


def shown_path(route: str) -> str:
    """The path of a route as a message shows it to a person (`/models/<name>/<task>`)."""
    return "/" + PARAMETER.sub(r"<\1>", ROUTES[route])


def openapi_path(route: str) -> str:
    """The path of a route as an OpenAPI document writes it (`/models/{name}`)."""
    return "/" + PARAMETER.sub(r"{\1}", ROUTES[route])


EMBEDDINGS_PATH = url_path("openai-embeddings")
CHAT_COMPLETIONS_PATH = url_path("openai-chat-completions")
COMPLETIONS_PATH = url_path("openai-completions")
USAGE_PATH = url_path("openai-usage")
RERANK_PATH = url_path("tei-rerank")
TOKENIZE_PATH = url_path("tei-tokenize")
EMBED_SPARSE_PATH = url_path("tei-embed-sparse")
HEALTH_PATH = url_path("health")
READY_PATH = url_path("ready")
MODELS_PATH = url_path("model-list")
OPENAI_PREFIX = "/" + ROUTES["openai-models"].split("/")[0] + "/"  # /v1/: errors in OpenAI's shape
FILES_PREFIX = url_path("openai-files")  # batch input uploads: a larger body limit, the token checked before the body
JOB_URL_PATTERN = rf"^({EMBEDDINGS_PATH}|{MODELS_PATH}/{NAME}(/{NAME})?)$"  # the same, as a JSON schema pattern
SERVED_BY_JOBS = f"{EMBEDDINGS_PATH}, {shown_path('model')} or {shown_path('model-task')}"  # a batch line's url
MODEL_PATH = re.compile(rf"^{MODELS_PATH}/(?P<name>{NAME})(?:/(?P<task>{NAME}))?$")  # POST /models/<name>[/<task>]
# Paths the API's front door serves (the rest, such as /admin/ and /dashboard/, go to Django's full stack).
FRONT_DOOR_PREFIXES = (MODELS_PATH, OPENAI_PREFIX, HEALTH_PATH, READY_PATH, RERANK_PATH, TOKENIZE_PATH,
                       EMBED_SPARSE_PATH)


def model_path(path: str) -> tuple[str, str | None] | None:
    """(model, task or None for its default) of a /models/<name>[/<task>] path, else None."""
    found = MODEL_PATH.match(path)
    if found is None:
        return None
    return found["name"], found["task"]
