"""The ONE place an error of the hierarchy (core.errors) becomes an HTTP answer."""

from __future__ import annotations

from django.http import HttpResponse

from models_registry.api.answer import Answer, json_answer, to_django
from models_registry.core.errors import HostingError


def error_answer(error: HostingError, request_id: str | None = None) -> Answer:
    """The API's JSON error shape ({"error", "error_type"}), with the right status and headers."""
    answer = json_answer({"error": error.message, "error_type": error.error_type}, error.status, error.headers)
    if request_id:
        answer.headers["X-Request-Id"] = request_id
    return answer


def error_response(error: HostingError, request_id: str | None = None) -> HttpResponse:
    """error_answer as a Django response."""
    return to_django(error_answer(error, request_id))
