"""The app's URLconf, made from its path table (core.paths.ROUTES): the API, its description, the dashboard, /metrics."""

from django.urls import path

from models_registry.api import (
    batch_routes,
    dashboard,
    metrics_view,
    openai_generation,
    openai_routes,
    openapi,
    sparse_route,
    tei_routes,
    tokenize_route,
    usage_route,
    views,
)
from models_registry.core import paths

# URL name -> view; the path each is served on is the table's.
VIEWS = {
    "model-list": views.model_list,
    "model": views.model_endpoint,
    "model-task": views.model_task_endpoint,
    "openai-embeddings": openai_routes.embeddings,
    "openai-models": openai_routes.list_models,
    "openai-chat-completions": openai_generation.chat_completions,
    "openai-completions": openai_generation.completions,
    "openai-files": batch_routes.file_collection,
    "openai-file": batch_routes.file_detail,
    "openai-file-content": batch_routes.file_content,
    "openai-batches": batch_routes.batch_collection,
    "openai-batch": batch_routes.batch_detail,
    "openai-batch-cancel": batch_routes.batch_cancel,
    "openai-usage": usage_route.usage,
    "tei-tokenize": tokenize_route.tokenize,
    "tei-rerank": tei_routes.rerank,
    "tei-embed-sparse": sparse_route.embed_sparse,
    "health": views.health,
    "ready": views.ready,
    "openapi-schema": openapi.schema_view,
    "openapi-docs": openapi.docs_view,
    "dashboard": dashboard.page,
    "dashboard-data": dashboard.data,
    "metrics": metrics_view.metrics,
}

urlpatterns = [path(route, VIEWS[name], name=name) for name, route in paths.ROUTES.items()]
