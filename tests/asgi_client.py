"""Django's AsyncClient, entering by the door production uses: the project's ASGI application.

API paths (core.paths.FRONT_DOOR_PREFIXES) go through hosting.asgi's API handler, exactly as uvicorn hands
them over (the route table, the refusals before the body, the Host check, the route skeleton); the admin, the
dashboard and /metrics go through Django's handler as before, which is also what production runs for them.
The answer comes back as the HttpResponse a Django test expects (status, headers, cookies, json() through the
client, and streaming_content for a stream), so a test reads the same either way.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from django.http import HttpResponse, StreamingHttpResponse
from django.test import AsyncClient as DjangoAsyncClient
from django.test.client import AsyncClientHandler
from django.test.utils import override_settings

from models_registry.core.paths import FRONT_DOOR_PREFIXES

Message = dict[str, Any]


class ProductionDoorHandler(AsyncClientHandler):
    """Runs API paths through the project's ASGI application; other paths through Django's test handler."""

    async def __call__(self, scope: dict[str, Any]) -> HttpResponse:
        if not scope["path"].startswith(FRONT_DOOR_PREFIXES):
            return await super().__call__(scope)
        application = production_application()
        body_file = scope.pop("_body_file", None)
        body = body_file.read() if body_file is not None else b""
        scope = {**scope, "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "client": scope.get("client") or ("127.0.0.1", 50000), "server": ("testserver", 80)}
        return await _run(application, scope, body)


def production_application() -> Any:
    """hosting.asgi's application; imported without starting the embedded Redis (the tests bring their broker)."""
    with override_settings(EMBEDDED_REDIS=False):
        from hosting.asgi import application
    return application


async def _run(application: Any, scope: dict[str, Any], body: bytes) -> HttpResponse:
    """The application's answer to one request: whole, or as a stream once its first chunk says more follows."""
    sent: asyncio.Queue[Message] = asyncio.Queue()
    finished = asyncio.Event()
    delivered = False

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await finished.wait()  # the client hangs up only once the test has read the answer
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        await sent.put(message)

    async def serve() -> None:
        try:
            await application(scope, receive, send)
        finally:
            await sent.put({"type": "_done"})

    task = asyncio.ensure_future(serve())
    start = await sent.get()
    if start["type"] == "_done":
        await task  # raises what the application raised
        raise AssertionError("the application answered nothing")
    first = await sent.get()
    if first.get("more_body"):
        response: HttpResponse = StreamingHttpResponse(_chunks(first, sent, finished, task), status=start["status"])
    else:
        finished.set()
        await task
        response = HttpResponse(first.get("body", b""), status=start["status"])
    _copy_headers(start, response)
    response.asgi_request = None  # no Django request was made (the client reads its urlconf, if any)
    return response


async def _chunks(first: Message, sent: asyncio.Queue[Message], finished: asyncio.Event,
                  task: asyncio.Future[None]) -> AsyncIterator[bytes]:
    message = first
    try:
        while True:
            if message.get("body"):
                yield message["body"]
            if message["type"] == "_done" or not message.get("more_body"):
                return
            message = await sent.get()
    finally:
        finished.set()
        await asyncio.gather(task, return_exceptions=True)


def _copy_headers(start: Message, response: HttpResponse) -> None:
    for name, value in start.get("headers", ()):
        key, text = name.decode("latin-1"), value.decode("latin-1")
        if key.lower() == "set-cookie":
            response.cookies.load(text)
        else:
            response.headers[key] = text


class AsyncClient(DjangoAsyncClient):
    """django.test.AsyncClient whose API requests go through the production ASGI application."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handler = ProductionDoorHandler(enforce_csrf_checks=kwargs.get("enforce_csrf_checks", False))
