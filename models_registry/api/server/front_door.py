"""The API's front door: the ASGI handler of every API path (core.paths), lean, no thread hops per request.

Django's ASGIHandler serves the admin well, but on the inference path it costs, per
request, a new ThreadSensitiveContext (a fresh executor thread), a hop to it for the
request_started receivers and another for response.close(): together they starve the
event loop under load, so that even a 503 waits behind them. This handler
serves the inference routes (api.server.route_table: the HF, OpenAI and TEI ones) without Django's
request, resolver, middleware or response: its Host header checked before the body (api.server.before_body), it reads the body and
runs the route (api.pipeline.inference_route) on the bytes, and writes its answer straight to the
connection. Every other API path keeps Django's request/response machinery and URL
routing, but:

- builds its middleware chain from conf.API_MIDDLEWARE (async-only, no sessions,
  CSRF or messages: API clients authenticate with bearer tokens);
- runs no request_started receivers (their job, closing stale DB connections, is done
  by the cached loaders that are this path's only database users) and closes the
  response inline;
- does not hand every 4xx/5xx to django.request's logger in a thread: a 503 under
  overload is an answer, not a server error, and every request is logged by the view;
- refuses a body over the route's limit on its Content-Length header and stops keeping a
  chunked one at the limit (Django would spool all of it first); at most DRAIN_BYTES
  more are read and dropped, so the client hears the 413.
"""

import asyncio
import tempfile

from django.conf import settings
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.exception import response_for_exception
from django.test.utils import override_settings
from django.urls import set_script_prefix, set_urlconf

from models_registry.api.server import before_body
from models_registry.api.pipeline import inference_route
from models_registry.api.openai import upload_route
from models_registry.api.pipeline.answer import Answer
from models_registry.api.pipeline.call import ApiCall, from_scope
from models_registry.api.pipeline.error_answers import error_response_for
from models_registry.core.conf import conf
from models_registry.core.errors import TooLarge
from models_registry.observe import ledger_flush, server_span, tracing

class BodyTooLarge(Exception):
    """The body grew past the route's limit while it was read."""

    def __init__(self, ended: bool) -> None:
        super().__init__("request body over the limit")
        self.ended = ended  # whether its last chunk had come


async def drain(receive, budget: int) -> bool:  # type: ignore[no-untyped-def]
    """Read and drop the rest of a body, up to budget bytes; whether it ended within them."""
    size = 0
    while size <= budget:
        message = await receive()
        if message["type"] == "http.disconnect":
            return False
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            return True
    return False


async def send_answer(send, answer: Answer) -> None:  # type: ignore[no-untyped-def]
    """Write answer to an ASGI connection: its body at once, or its events as they come."""
    content_type = answer.content_type
    if content_type.startswith("text/") and "charset" not in content_type:
        content_type += "; charset=utf-8"
    headers = [(b"content-type", content_type.encode("latin-1")), (b"x-content-type-options", b"nosniff")]
    headers += [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in answer.headers.items()]
    if answer.events is None:
        headers.append((b"content-length", str(len(answer.body)).encode("latin-1")))
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        await send({"type": "http.response.body", "body": answer.body})
        return
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    events = answer.events
    try:
        async for chunk in events:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    finally:
        await events.aclose()  # type: ignore[attr-defined]  # its cleanup (closing the stream) runs now
    await send({"type": "http.response.body", "body": b""})


class ApiASGIHandler(ASGIHandler):
    """Django's ASGIHandler for the API routes, without the per-request thread hops."""

    def __init__(self) -> None:
        super().__init__()
        tracing.setup("web")  # OTEL_EXPORTER_OTLP_ENDPOINT set: this process exports its spans

    def load_middleware(self, is_async: bool = False) -> None:
        """Build the chain once, at start, from the API list."""
        with override_settings(MIDDLEWARE=conf.API_MIDDLEWARE):
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
        if tracing.tracer is None:
            await self.handle(scope, receive, send)
        else:  # the request's SERVER span around all of it, a stream's until its last event
            await server_span.serve_traced(scope, receive, send, self.handle)

    async def handle(self, scope, receive, send):  # type: ignore[no-untyped-def]
        """Django's handle(), minus the request_started hop, with an inline close."""
        if not ledger_flush.decided:  # its first request: this web process moves the usage counters to the database
            ledger_flush.decide()
        call = from_scope(scope)  # the headers, read once: the refusals and the route read them here
        verdict = await before_body.check(call)  # one stage: what the headers already decide (an upload's reservation)
        try:
            if verdict.refusal is not None:
                await self._refuse(receive, send, call, verdict.refusal)
            else:
                await self._serve(scope, receive, send, call, verdict)
        finally:
            if call.reservation is not None:  # after the answer, on an error or a disconnect: the upload's storage
                await upload_route.release(call.reservation)

    async def _refuse(self, receive, send, call: ApiCall,  # type: ignore[no-untyped-def]
                      refused: before_body.Refusal) -> None:
        """Answer a refusal given before the body was read, draining what the client still sends within its limit."""
        if refused.drain is None:  # the fast 503: nothing of the body is read
            await self.send_response(refused.response, send)
            refused.response.close()
            return
        declared = before_body.declared_length(call.content_length)
        no_body = declared == 0 or (declared is None and not call.chunked)
        heard = no_body or (declared is not None and declared <= refused.drain and await drain(receive, declared))
        await self._answer_early(send, refused.response, heard)

    async def _serve(self, scope, receive, send, call, verdict: before_body.Verdict):  # type: ignore[no-untyped-def]
        """The rest of handle(): the body read within its limit, then the route or Django's view."""
        matched, limit = verdict.route, verdict.limit
        try:
            if matched is not None:
                body = await self.read_limited_bytes(receive, limit)
            else:
                body_file = await self.read_limited_body(receive, limit)
        except RequestAborted:
            return
        except BodyTooLarge as too_large:
            heard = too_large.ended or await drain(receive, before_body.DRAIN_BYTES)
            await self._too_large(call, send, f"request body is over the limit of {limit} bytes", heard)
            return
        if matched is not None:
            call.body = body
            await self._until_disconnect(receive, self._serve_route(scope, send, call, *matched))
            return
        set_script_prefix(get_script_prefix(scope))
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            body_file.close()
            await self.send_response(error_response, send)
            error_response.close()
            return
        request.api_call = call  # what was read and checked before the body (its request id, its token's grant)

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

        response = await self._until_disconnect(receive, process_request())
        if response is not None:
            response.close()
        body_file.close()

    async def _until_disconnect(self, receive, work):  # type: ignore[no-untyped-def]
        """work's result, unless the client disconnects first: then work is cancelled (and so its
        queued inference) and None is the result. work runs in this task; only the watch is a task."""
        current = asyncio.current_task()
        gone = False

        async def watch() -> None:
            nonlocal gone
            try:
                await self.listen_for_disconnect(receive)
            except RequestAborted:
                gone = True
                current.cancel()  # type: ignore[union-attr]

        watcher = asyncio.create_task(watch())
        try:
            result = await work
        except asyncio.CancelledError:
            if not gone:
                raise
            current.uncancel()  # type: ignore[union-attr]  # the client's going, not ours: the request just ends
            return None
        finally:
            watcher.cancel()
        if gone and current.cancelling():  # type: ignore[union-attr]  # work swallowed it (gone mid-send)
            current.uncancel()  # type: ignore[union-attr]
        return result

    async def _serve_route(self, scope, send, call: ApiCall, route, path) -> None:  # type: ignore[no-untyped-def]
        """An inference route served on the bytes of its body (its Host checked before: api.server.before_body), its answer
        written straight to the connection."""
        answer = await inference_route.serve(route, call, path)
        answer.headers["X-Request-Id"] = call.request_id
        try:
            await send_answer(send, answer)
        except asyncio.CancelledError:
            pass  # client went away during the send

    async def _limited_chunks(self, receive, limit: int):  # type: ignore[no-untyped-def]
        """The body's chunks as they come; RequestAborted on a disconnect, BodyTooLarge past limit bytes."""
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise RequestAborted()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge(ended=not message.get("more_body", False))
            yield chunk
            if not message.get("more_body", False):
                return

    async def read_limited_bytes(self, receive, limit: int) -> bytes:  # type: ignore[no-untyped-def]
        """The whole body in memory (an inference body's limit is small)."""
        return b"".join([chunk async for chunk in self._limited_chunks(receive, limit)])

    async def read_limited_body(self, receive, limit: int):  # type: ignore[no-untyped-def]
        """Django's read_body on _limited_chunks: a spooled file, handed to the request (which closes it)."""
        body_file = tempfile.SpooledTemporaryFile(max_size=settings.FILE_UPLOAD_MAX_MEMORY_SIZE, mode="w+b")  # noqa: SIM115
        try:
            async for chunk in self._limited_chunks(receive, limit):
                body_file.write(chunk)
        except BaseException:
            body_file.close()
            raise
        body_file.seek(0)
        return body_file

    async def _too_large(self, call: ApiCall, send, message: str, heard: bool) -> None:  # type: ignore[no-untyped-def]
        """413; unless the whole body was read (heard), the connection is closed after it."""
        response = error_response_for(call.path, TooLarge(message), call.request_id)
        await self._answer_early(send, response, heard)

    async def _answer_early(self, send, response, heard: bool) -> None:  # type: ignore[no-untyped-def]
        """Send an answer given before the body was read; unless all of it was (heard), close the connection."""
        if not heard:
            response["Connection"] = "close"
        await self.send_response(response, send)
        response.close()
