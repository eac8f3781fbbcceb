"""GET /metrics: django-prometheus' and our metrics of every web process on the port, behind HOSTING_METRICS_TOKEN when set."""

from __future__ import annotations

import hmac

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from models_registry.api.pipeline.error_answers import error_response
from models_registry.broker import scaling_metrics
from models_registry.core.conf import conf
from models_registry.core.errors import Unauthorized
from models_registry.observe import metrics as inference_metrics
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
    # Every web process' counters when several share the port (observe.metrics, multiprocess mode).
    return HttpResponse(generate_latest(inference_metrics.scraped_registry()), content_type=CONTENT_TYPE_LATEST)
