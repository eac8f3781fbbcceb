"""The ONE place an error of the hierarchy (core.errors) becomes an HTTP response."""

from __future__ import annotations

from django.http import JsonResponse

from models_registry.core.errors import HostingError


def error_response(error: HostingError, request_id: str | None = None) -> JsonResponse:
    """The API's JSON error shape ({"error", "error_type"}), with the right status and headers."""
    response = JsonResponse({"error": error.message, "error_type": error.error_type}, status=error.status)
    for name, value in error.headers.items():
        response[name] = value
    if request_id:
        response["X-Request-Id"] = request_id
    return response
