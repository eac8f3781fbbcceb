"""One API request as the inference routes read it, whatever brought it: ASGI, Django or a batch-job line."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest

from models_registry.core.conf import conf
from models_registry.core.errors import TooLarge

if TYPE_CHECKING:
    from models_registry.policy.auth import TokenGrant  # the ORM: not imported at run time here
    from models_registry.policy.upload_reservations import Reservation

_VALID_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


def request_id_from(header: str | None) -> str:
    """The client's X-Request-Id when it is sane, else a new one (random, 32 hex digits)."""
    if header and _VALID_ID.match(header):
        return header
    return os.urandom(16).hex()  # what uuid4().hex carries, without building a UUID


@dataclass(slots=True)
class ApiCall:
    """What a route may read of a request: no transport, no Django request object.

    The front door reads a request's headers into one before its body comes (its refusals
    read them here), and sets body once it is read; nothing changes a call after that.
    """

    request_id: str
    method: str
    path: str
    body: bytes
    content_type: str  # the media type, without its parameters
    authorization: str | None = None
    priority: str | None = None  # the X-Priority header
    # A batch-job line acts as its job's owner: that token record's id (never set from HTTP).
    acting_token_id: int | None = None
    # The admin's sample request (staff.sample_request): a staff user, no token, no rate limit (never set from HTTP).
    staff: bool = False
    # What the front door checks before the body (from_scope): the Host header, Content-Length, chunking.
    host: str | None = None
    server: tuple[str, int] | None = None  # the address it came in on (the Host check's, without a Host header)
    content_length: str | None = None
    chunked: bool = False
    # An upload's storage reservation, made before its body (api.openai.upload_route's admit), dropped once it is answered.
    reservation: Reservation | None = None
    # Whether the front door checked the token before the body (api.server.before_body), and the grant it found (None:
    # tokens are off): the route takes it from here instead of checking it again.
    token_checked: bool = False
    grant: TokenGrant | None = None
    content_type_header: str = ""  # the Content-Type as sent, its parameters too (a multipart form's boundary)


def header(scope: dict[str, Any], name: bytes) -> str | None:
    """The value of an ASGI scope's header name (lowercase bytes), or None."""
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


def media_type(header: str) -> str:
    """The media type of a Content-Type header value (its parameters dropped)."""
    return header.split(";", 1)[0].strip()


def from_scope(scope: dict[str, Any]) -> ApiCall:
    """The call of an ASGI HTTP scope, its headers read in one pass (the front door sets body once it is read)."""
    authorization = priority = host = length = request_id = None
    content_type = content_type_header = ""
    chunked = False
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            authorization = value.decode("latin-1")
        elif name == b"content-type":
            content_type_header = value.decode("latin-1")
            content_type = media_type(content_type_header)
        elif name == b"x-priority":
            priority = value.decode("latin-1")
        elif name == b"host":
            host = value.decode("latin-1")
        elif name == b"content-length":
            length = value.decode("latin-1")
        elif name == b"transfer-encoding":
            chunked = "chunked" in value.decode("latin-1").lower()
        elif name == b"x-request-id":
            request_id = value.decode("latin-1")
    return ApiCall(request_id_from(request_id), scope["method"], scope["path"], b"", content_type, authorization,
                   priority, host=host, server=scope.get("server"), content_length=length, chunked=chunked,
                   content_type_header=content_type_header)


def from_django(request: HttpRequest) -> ApiCall:
    """The call of a Django request (its body read under the API's limit: 413 past it)."""
    try:
        body = request.body
    except RequestDataTooBig:
        raise TooLarge(f"request body is over the limit of {conf.MAX_BODY_BYTES} bytes") from None
    request_id = getattr(request, "request_id", None) or request_id_from(request.headers.get("X-Request-Id"))
    return ApiCall(request_id, request.method or "GET", request.path, body, request.content_type or "",
                   request.headers.get("Authorization"), request.headers.get("X-Priority"),
                   content_type_header=request.headers.get("Content-Type", ""))
