"""The API's middleware: request ids, and the guards every API answer gets (async-native: no thread hop)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.core.exceptions import DisallowedHost

from models_registry.api.pipeline.call import request_id_from
from models_registry.api.pipeline.error_answers import error_response
from models_registry.core import paths
from models_registry.core.errors import InvalidInput


def _request_id(request: Any) -> str:
    """The id the API handler gave the request before its body (its refusals used it too), else one from its header."""
    call = getattr(request, "api_call", None)
    return call.request_id if call is not None else request_id_from(request.headers.get("X-Request-Id"))


class RequestIdMiddleware:
    """Accept X-Request-Id from the client or make one; echo it on the response."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: Any) -> Any:
        if self.is_async:
            return self._acall(request)
        request.request_id = _request_id(request)
        response = self.get_response(request)
        response["X-Request-Id"] = request.request_id
        return response

    async def _acall(self, request: Any) -> Any:
        request.request_id = _request_id(request)
        response: Any = await self.get_response(request)
        response["X-Request-Id"] = request.request_id
        return response



# Probes reach a pod by its IP, which no ALLOWED_HOSTS lists; they answer nothing private.
PROBE_PATHS = (paths.HEALTH_PATH, paths.READY_PATH)


class ApiGuardMiddleware:
    """ALLOWED_HOSTS on the API paths (Django checks it only in CommonMiddleware) and nosniff on every answer."""

    async_capable = True
    sync_capable = False

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response
        markcoroutinefunction(self)

    async def __call__(self, request: Any) -> Any:
        if not request.path.startswith(PROBE_PATHS):
            try:
                request.get_host()
            except DisallowedHost:
                response: Any = error_response(InvalidInput("this server does not answer for that Host header"),
                                               getattr(request, "request_id", None))
                response["X-Content-Type-Options"] = "nosniff"
                return response
        response = await self.get_response(request)
        response["X-Content-Type-Options"] = "nosniff"
        return response
