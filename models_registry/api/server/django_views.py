"""Django's one way into the API: the inference routes' views made from the route table, and every API view's wrapper.

The front door (api.server.front_door) serves a POST to an inference route itself. Everything
else on those paths (another method, GET /models/<name>) and every call of a project that
serves the app through Django alone comes here: one view per route table entry, built by
inference_view, runs the same pipeline (api.pipeline.inference_route), so no route has a twin.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from models_registry.api.pipeline import inference_route
from models_registry.api.pipeline.answer import to_django
from models_registry.api.pipeline.call import from_django
from models_registry.api.pipeline.error_answers import error_response
from models_registry.core.errors import HostingError, MethodNotAllowed, NotFound, internal_error

logger = logging.getLogger("models_registry.requests")

AsyncView = Callable[..., Awaitable[HttpResponse]]


def api_view(
    *methods: str,
    allowed: tuple[str, ...] = (),
    render: Callable[[HostingError, str | None], HttpResponse] = error_response,
) -> Callable[[AsyncView], AsyncView]:
    """Allow only methods, and turn every error into a JSON answer (never a trace).

    allowed: what a 405's Allow header lists, when the view itself refuses some of methods.
    render: the error shape (api.pipeline.error_answers' by default; the OpenAI routes pass their own).
    """

    def decorate(view: AsyncView) -> AsyncView:
        @wraps(view)
        async def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            request_id = getattr(request, "request_id", None)
            try:
                if request.method not in methods:
                    allow = ", ".join(allowed or methods)
                    raise MethodNotAllowed(f"{request.method} is not allowed here; use {allow}", headers={"Allow": allow})
                return await view(request, *args, **kwargs)
            except HostingError as error:
                return render(error, request_id)
            except Exception:
                logger.exception("unhandled error in %s (request %s)", request.path, request_id)
                return render(internal_error(request_id), request_id)

        return csrf_exempt(wrapper)

    return decorate


def inference_view(route: inference_route.InferenceRoute, get: AsyncView | None = None) -> AsyncView:
    """The Django view of an inference route: POST (and any other method: its 405) runs the pipeline; get serves GET."""

    other = api_view("GET", allowed=("POST", "GET"))(get) if get is not None else None

    async def view(request: HttpRequest, **path: str) -> HttpResponse:
        if other is not None and request.method != "POST":
            return await other(request, **path)
        return to_django(await inference_route.serve(route, from_django(request), path))

    view.route = route  # type: ignore[attr-defined]  # which route it serves, for the URLconf's readers
    return csrf_exempt(view)


def api_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """JSON 404 for unknown routes."""
    return error_response(NotFound(f"no route {request.path}"), getattr(request, "request_id", None))


def api_server_error(request: HttpRequest) -> HttpResponse:
    """JSON 500 when Django itself fails (never a stack trace)."""
    request_id = getattr(request, "request_id", None)
    return error_response(internal_error(request_id), request_id)
