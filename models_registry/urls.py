"""The app's URLconf, made from its path table (core.paths.ROUTES) and its route table (api.server.route_table).

Every inference route gets its one Django view from the route table (api.server.django_views.inference_view);
the other paths name their views here.
"""

from django.urls import path

from models_registry.api.hf import model_views
from models_registry.api.openai import batch_routes, openai_routes, responses_views, usage_route
from models_registry.api.openapi import openapi
from models_registry.api.operations import metrics_view, probes
from models_registry.api.server import route_table
from models_registry.api.server.django_views import inference_view
from models_registry.core import paths
from models_registry.staff import dashboard

GETS = {"model": model_views.model_detail}  # an inference path that also answers GET

# URL name -> view; the path each is served on is the table's.
VIEWS = {
    **{name: inference_view(route, get=GETS.get(name)) for name, route in route_table.ROUTES.items()},
    "model-list": model_views.model_list,
    "openai-models": openai_routes.list_models,
    "openai-files": batch_routes.file_collection,
    "openai-file": batch_routes.file_detail,
    "openai-file-content": batch_routes.file_content,
    "openai-batches": batch_routes.batch_collection,
    "openai-batch": batch_routes.batch_detail,
    "openai-batch-cancel": batch_routes.batch_cancel,
    "openai-usage": usage_route.usage,
    "openai-response": responses_views.response_detail,
    "health": probes.health,
    "ready": probes.ready,
    "openapi-schema": openapi.schema_view,
    "openapi-docs": openapi.docs_view,
    "dashboard": dashboard.page,
    "dashboard-data": dashboard.data,
    "metrics": metrics_view.metrics,
}

urlpatterns = [path(route, VIEWS[name], name=name) for name, route in paths.ROUTES.items()]
