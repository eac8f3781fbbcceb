"""GET and DELETE /v1/responses/{response_id}: a token's stored responses (errors in OpenAI's shape)."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse

from models_registry.api.openai.openai_routes import openai_view
from models_registry.catalog.lookups import fresh_connection
from models_registry.jobs import response_store
from models_registry.policy import auth


@openai_view("GET", "DELETE")
async def response_detail(request: HttpRequest, response_id: str) -> HttpResponse:
    """GET: one stored response. DELETE: delete it. Another token's id is a 404, as an unknown one."""
    grant = await auth.authorize(request.headers.get("Authorization"), None)
    owner = grant.token_id if grant is not None else None
    if request.method == "DELETE":
        return JsonResponse(await sync_to_async(fresh_connection(response_store.delete))(response_id, owner))
    return JsonResponse(await sync_to_async(fresh_connection(response_store.get_json))(response_id, owner))
