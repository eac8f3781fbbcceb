"""An ASGI handler for the inference API: lean middleware, no thread hops per request.

Django's ASGIHandler serves the admin well, but on the inference path it costs, per
request, a new ThreadSensitiveContext (a fresh executor thread), a hop to it for the
request_started receivers and another for response.close(): together they starved the
event loop under load (503 answers took 0.5 s at 150 concurrent clients). This handler
keeps Django's request/response machinery and URL routing but:

- builds its middleware chain from settings.API_MIDDLEWARE (async-only, no sessions,
  CSRF or messages: API clients authenticate with bearer tokens);
- runs no request_started receivers (their job, closing stale DB connections, is done
  by the cached loaders that are this path's only database users) and closes the
  response inline;
- does not hand every 4xx/5xx to django.request's logger in a thread: a 503 under
  overload is an answer, not a server error, and every request is logged by the view.
"""

import asyncio

from django.conf import settings
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.exception import response_for_exception
from django.test.utils import override_settings
from django.urls import set_script_prefix, set_urlconf


class ApiASGIHandler(ASGIHandler):
    """Django's ASGIHandler for the API routes, without the per-request thread hops."""

    def load_middleware(self, is_async: bool = False) -> None:
        """Build the chain once, at start, from the API list."""
        with override_settings(MIDDLEWARE=settings.API_MIDDLEWARE):
            super().load_middleware(is_async=is_async)

    async def get_response_async(self, request):  # type: ignore[no-untyped-def]
        """Run the middleware chain and view (no per-error logging hop)."""
        set_urlconf(settings.ROOT_URLCONF)
        response = await self._middleware_chain(request)
        response._resource_closers.append(request.close)
        return response

    async def __call__(self, scope, receive, send):  # type: ignore[no-untyped-def]
        """Serve one HTTP request (no ThreadSensitiveContext: nothing here is thread-bound)."""
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        await self.handle(scope, receive, send)

    async def handle(self, scope, receive, send):  # type: ignore[no-untyped-def]
        """Django's handle(), minus the request_started hop, with an inline close."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            body_file.close()
            await self.send_response(error_response, send)
            error_response.close()
            return

        async def process_request() -> object:
            try:
                response = await self.get_response_async(request)
            except Exception as error:  # never a stack trace to the client
                response = response_for_exception(request, error)
            response._handler_class = self.__class__
            try:
                await self.send_response(response, send)
            except asyncio.CancelledError:
                pass  # client went away during the send
            return response

        # A client that disconnects cancels its view (and so its queued inference).
        tasks = [
            asyncio.create_task(self.listen_for_disconnect(receive)),
            asyncio.create_task(process_request()),
        ]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if task.done():
                try:
                    task.result()
                except RequestAborted:
                    pass
            else:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        if not tasks[1].cancelled() and tasks[1].exception() is None:
            tasks[1].result().close()
        body_file.close()
