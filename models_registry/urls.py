"""Routes of the HTTP API, the OpenAI-compatible routes, the API's own description, the dashboard and /metrics."""

from django.urls import path, re_path

from models_registry.api import (
    batch_routes,
    dashboard,
    metrics_view,
    openai_generation,
    openai_routes,
    openapi,
    tei_routes,
    tokenize_route,
    views,
)
from models_registry.core import paths

urlpatterns = [
    path("models", views.model_list, name="model-list"),
    # /models/<name>[/<task>]: the path table's patterns (core.paths), as the front door matches them.
    re_path(rf"^{paths.MODEL_ROUTE}$", views.model_endpoint, name="model"),
    re_path(rf"^{paths.MODEL_TASK_ROUTE}$", views.model_task_endpoint, name="model-task"),
    path("v1/embeddings", openai_routes.embeddings, name="openai-embeddings"),
    path("v1/models", openai_routes.list_models, name="openai-models"),
    path("v1/chat/completions", openai_generation.chat_completions, name="openai-chat-completions"),
    path("v1/completions", openai_generation.completions, name="openai-completions"),
    path("v1/files", batch_routes.file_collection, name="openai-files"),
    path("v1/files/<str:file_id>", batch_routes.file_detail, name="openai-file"),
    path("v1/files/<str:file_id>/content", batch_routes.file_content, name="openai-file-content"),
    path("v1/batches", batch_routes.batch_collection, name="openai-batches"),
    path("v1/batches/<str:batch_id>", batch_routes.batch_detail, name="openai-batch"),
    path("v1/batches/<str:batch_id>/cancel", batch_routes.batch_cancel, name="openai-batch-cancel"),
    path("tokenize", tokenize_route.tokenize, name="tei-tokenize"),
    path("rerank", tei_routes.rerank, name="tei-rerank"),
    path("health", views.health, name="health"),
    path("ready", views.ready, name="ready"),
    path("api/openapi.json", openapi.schema_view, name="openapi-schema"),
    path("api/docs", openapi.docs_view, name="openapi-docs"),
    path("dashboard/", dashboard.page, name="dashboard"),
    path("dashboard/data.json", dashboard.data, name="dashboard-data"),
    path("metrics", metrics_view.metrics, name="prometheus-django-metrics"),
]
