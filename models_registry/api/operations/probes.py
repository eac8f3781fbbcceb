"""GET /health (liveness) and GET /ready (what a load balancer routes on)."""

from __future__ import annotations

import hmac
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse

from models_registry.api.operations import readiness
from models_registry.api.server.django_views import api_view
from models_registry.core.conf import conf
from models_registry.core.errors import HostingError
from models_registry.policy import auth


@api_view("GET")
async def health(request: HttpRequest) -> HttpResponse:
    """Liveness of this web process: never waits on a worker or the broker."""
    return JsonResponse({"status": "ok"})


@api_view("GET")
async def ready(request: HttpRequest) -> HttpResponse:
    """200 when the database and the broker answer and every model the live workers are meant to serve is served.

    Anyone (a load balancer) gets the verdict, what is missing and how many models are in
    each state; model names only a caller whose token may use them (all of them with
    HOSTING_METRICS_TOKEN, the operator's), so that /ready does not list what a scoped
    token's GET /models hides.
    """
    report = await readiness.check(await _names_shown(request.headers.get("Authorization")))
    return JsonResponse(report, status=200 if report["status"] == "ready" else 503)


async def _names_shown(authorization: str | None) -> Callable[[str], bool] | None:
    """Which model names this caller may see (None: none)."""
    given = auth.bearer_token(authorization or "")
    if given and conf.METRICS_TOKEN and hmac.compare_digest(given.encode(), conf.METRICS_TOKEN.encode()):
        return lambda name: True
    if given is None and conf.REQUIRE_API_TOKEN:
        return None
    try:
        grant = await auth.authorize(authorization, None)
    except HostingError:
        return None  # a bad token on /ready: still the verdict, as to anyone
    return (lambda name: True) if grant is None else grant.allows
