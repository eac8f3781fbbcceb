"""GET /metrics: django-prometheus' exposition, behind HOSTING_METRICS_TOKEN when it is set."""

from __future__ import annotations

import hmac

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET
from django_prometheus.exports import ExportToDjangoView

from models_registry.api.error_answers import error_response
from models_registry.broker import scaling_metrics
from models_registry.core.conf import conf
from models_registry.core.errors import Unauthorized
from models_registry.policy.auth import bearer_token

scaling_metrics.register()  # the autoscaler's inputs (broker: it reads the admission sets)


@csrf_exempt  # no session or form here: a wrong method is a 405, not a CSRF 403
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """The Prometheus text format; a bearer token is required only if one is configured."""
    expected = conf.METRICS_TOKEN
    if expected:
        given = bearer_token(request.headers.get("Authorization", "")) or ""
        if not hmac.compare_digest(given.encode(), expected.encode()):
            return error_response(Unauthorized("metrics need 'Authorization: Bearer <HOSTING_METRICS_TOKEN>'"),
                                  getattr(request, "request_id", None))
    return ExportToDjangoView(request)
