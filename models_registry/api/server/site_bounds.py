"""Body limits for the paths Django's full stack serves (the admin, /dashboard/, /metrics, static files).

The API's front door (models_registry/api/server/front_door.py) bounds its own routes' bodies; Django's
ASGIHandler reads any body whole into a spooled temp file before a view (or the admin's
login, or a 403) sees it. This wrapper gives those paths the same limit
(front_door.body_limit, HOSTING_MAX_BODY_BYTES): a Content-Length over it is answered
413 before any of the body is read, and a chunked body is cut off at the limit (413,
and Django sees the client gone, so it serves nothing). As on the API, at most
DRAIN_BYTES more are read and dropped so that a client still sending hears the answer;
past that its connection is closed.

no_encoded_slash refuses, on every path, one that spells a '/' as %2F (404): ASGI
servers decode it, so `/models/a%2Fb` would otherwise route as /models/a/b.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from models_registry.api.pipeline.call import header, request_id_from
from models_registry.api.pipeline.error_answers import error_response
from models_registry.api.server.before_body import DRAIN_BYTES, body_limit, declared_length
from models_registry.api.server.front_door import drain
from models_registry.core.errors import HostingError, NotFound, TooLarge

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def encoded_slash(scope: Scope) -> bool:
    """Whether the request's path (as sent, before decoding) holds an encoded '/' (%2F)."""
    raw = scope.get("raw_path") or b""
    return b"%2f" in raw.split(b"?", 1)[0].lower()


async def send_error(send: Send, scope: Scope, error: HostingError, close: bool) -> None:
    """The API's JSON error, written straight to the connection; close: ask the server to close it after."""
    response = error_response(error, request_id_from(header(scope, b"x-request-id")))
    if close:
        response["Connection"] = "close"
    headers = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in response.items()]
    headers.append((b"content-length", str(len(response.content)).encode("latin-1")))
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": response.content})


def no_encoded_slash(app: App) -> App:
    """app, with a 404 for a path that spells a '/' as %2F (every path: the API's and the site's)."""

    async def routed_app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and encoded_slash(scope):
            await send_error(send, scope, NotFound("no route: the path spells a '/' as %2F; "
                                                   "name the model and the task as separate path segments"),
                             close=False)
            return
        await app(scope, receive, send)

    return routed_app


def bounded(app: App) -> App:
    """app (Django's full stack), with every request's body held to its path's limit."""

    async def bounded_app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        limit = body_limit(scope["path"])
        declared = declared_length(header(scope, b"content-length"))
        if declared is not None and declared > limit:
            heard = declared <= limit + DRAIN_BYTES and await drain(receive, declared)
            await send_error(send, scope, TooLarge(f"request body is {declared} bytes; the limit is {limit}"),
                             close=not heard)
            return
        size = 0
        refused = False

        async def limited_receive() -> Message:
            nonlocal size, refused
            if refused:  # Django listens for the disconnect after its read: the request is over
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] != "http.request":
                return message
            size += len(message.get("body", b""))
            if size <= limit:
                return message
            refused = True
            heard = not message.get("more_body", False) or await drain(receive, DRAIN_BYTES)
            await send_error(send, scope, TooLarge(f"request body is over the limit of {limit} bytes"),
                             close=not heard)
            return {"type": "http.disconnect"}  # Django's read_body: RequestAborted, nothing served

        await app(scope, limited_receive, send)

    return bounded_app
