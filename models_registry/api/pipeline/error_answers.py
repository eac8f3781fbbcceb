"""The ONE place an error of the hierarchy (core.errors) becomes an HTTP answer."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse

from models_registry.api.pipeline.answer import Answer, json_answer, to_django
from models_registry.core.errors import HostingError, InvalidInput
from models_registry.core.paths import OPENAI_PREFIX


def error_answer(error: HostingError, request_id: str | None = None) -> Answer:
    """The API's JSON error shape ({"error", "error_type"}), with the right status and headers."""
    answer = json_answer({"error": error.message, "error_type": error.error_type}, error.status, error.headers)
    if request_id:
        answer.headers["X-Request-Id"] = request_id
    return answer


def error_response(error: HostingError, request_id: str | None = None) -> HttpResponse:
    """error_answer as a Django response."""
    return to_django(error_answer(error, request_id))


# Errors the SDK must not retry: a pipeline error repeats, and a timeout retried triples the wait.
_NO_RETRY = {"internal", "timeout"}


def openai_error_body(error: HostingError) -> dict[str, Any]:
    """OpenAI's error object for one of our errors (our slug as `code` and `error_type`)."""
    return {
        "error": {
            "message": error.message,
            "type": "server_error" if error.status >= 500 else "invalid_request_error",
            "param": getattr(error, "param", None),
            "code": error.error_type,
        },
        "error_type": error.error_type,
    }


def openai_error_answer(error: HostingError, request_id: str | None) -> Answer:
    """The HTTP answer for error on a /v1 route: same status and headers as everywhere."""
    answer = json_answer(openai_error_body(error), error.status, error.headers)
    if error.error_type in _NO_RETRY:
        answer.headers["X-Should-Retry"] = "false"  # read by the openai SDK's retry loop
    if request_id:
        answer.headers["X-Request-Id"] = request_id
    return answer


def openai_error_response(error: HostingError, request_id: str | None) -> HttpResponse:
    """openai_error_answer as a Django response."""
    return to_django(openai_error_answer(error, request_id))


def error_answer_for(path: str, error: HostingError, request_id: str | None = None) -> Answer:
    """The error in the shape of the route path belongs to: OpenAI's under /v1/, the API's one shape elsewhere."""
    if path.startswith(OPENAI_PREFIX):
        return openai_error_answer(error, request_id)
    return error_answer(error, request_id)


def error_response_for(path: str, error: HostingError, request_id: str | None = None) -> HttpResponse:
    """error_answer_for as a Django response."""
    return to_django(error_answer_for(path, error, request_id))


def invalid(message: str, param: str | None) -> InvalidInput:
    """A 400 that names the offending request field (OpenAI's `param`)."""
    error = InvalidInput(message)
    error.param = param  # type: ignore[attr-defined]
    return error
