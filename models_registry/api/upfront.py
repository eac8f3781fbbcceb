"""Refusals the API handler gives from a request's headers alone, before it reads any of the body.

- A Content-Length that is not a decimal number is a 400 (Django would take it for 0, and
  the files route raised on it: a 500).
- /v1/files takes bodies of up to HOSTING_BATCH_MAX_FILE_BYTES: without a valid token the
  401 comes before any of them is read (it read a whole 150 MB upload first).
"""

from __future__ import annotations

from django.http import HttpResponse

from models_registry.api.call import header, request_id_from
from models_registry.api.error_answers import error_response_for
from models_registry.core import paths
from models_registry.core.errors import HostingError, InvalidInput
from models_registry.policy import auth

AUTH_FIRST = (paths.FILES_PREFIX,)  # routes with large bodies: the token is checked before the body is read


def is_chunked(scope: dict) -> bool:  # type: ignore[type-arg]
    """Whether the body comes in chunks of unannounced size (else Content-Length, or no body)."""
    return "chunked" in (header(scope, b"transfer-encoding") or "").lower()


def _check_length(scope: dict) -> None:  # type: ignore[type-arg]
    length = header(scope, b"content-length")
    if length is not None and not length.strip().isdigit():
        raise InvalidInput(f"malformed Content-Length header {length[:40]!r}: send the body's size in bytes")


async def refusal(scope: dict) -> HttpResponse | None:  # type: ignore[type-arg]
    """The answer to a request its headers already rule out, or None to read its body and serve it."""
    try:
        _check_length(scope)
        if scope["path"].startswith(AUTH_FIRST):
            await auth.authorize(header(scope, b"authorization"), None)
    except HostingError as error:
        return error_response_for(scope["path"], error, request_id_from(header(scope, b"x-request-id")))
    return None
