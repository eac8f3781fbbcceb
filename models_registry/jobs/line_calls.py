"""Running one job line through the very views that serve its url, in this process.

The line becomes a Django request for the API handler (same middleware, routing, checks,
limits, hand-off to the workers and answer shapes), so its answer is byte for byte the
answer the same request sent over HTTP would get.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson
from django.conf import settings
from django.http import HttpRequest

from models_registry.jobs.lines import JobLine
from models_registry.policy import auth

BATCH_PRIORITY = "batch"
# A streamed answer has no place in a JSONL output, and a stream opened here would never be
# read (nor closed: the worker would go on generating into it), so such lines are refused
# before the view runs, with the 400 the same request's body error would get.
STREAM_REFUSED = orjson.dumps({
    "error": "\"stream\": true is not available in batch jobs; send the line without it (or false) to get "
             "the whole answer in the output file",
    "error_type": "invalid_input",
})


@dataclass(frozen=True)
class LineAnswer:
    """What the view answered."""

    status: int
    body: bytes
    retry_after_s: float | None = None


def _host() -> str:
    """A Host header the API accepts (ALLOWED_HOSTS applies to these requests too)."""
    for host in settings.ALLOWED_HOSTS:
        if host and host != "*" and not host.startswith("."):
            return host
    return "localhost"


def build_request(line: JobLine, request_id: str) -> HttpRequest:
    """The HTTP request a client would have sent for line (JSON body, batch priority)."""
    body = orjson.dumps(line.body)
    request = HttpRequest()
    request.method = "POST"
    request.path = request.path_info = line.url
    request.META = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": line.url,
        "SERVER_NAME": _host(),
        "SERVER_PORT": "80",
        "HTTP_HOST": _host(),
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_X_REQUEST_ID": request_id,
        "HTTP_X_PRIORITY": BATCH_PRIORITY,
        "REMOTE_ADDR": "127.0.0.1",
    }
    request.content_type, request.content_params = "application/json", {}
    request._body = body  # what request.body returns
    return request


class LineCaller:
    """Calls the API handler in-process, acting as the job's token."""

    def __init__(self) -> None:
        from hosting.api_handler import ApiASGIHandler  # the ASGI app's own handler class

        self.handler = ApiASGIHandler()

    async def call(self, line: JobLine, owner_id: int | None, request_id: str) -> LineAnswer:
        """The view's answer to line, run as the job's owner (its token record's id)."""
        if line.body.get("stream") is True:
            return LineAnswer(400, STREAM_REFUSED)
        request = build_request(line, request_id)
        acting = auth.acting_token_id.set(owner_id)
        try:
            response = await self.handler.get_response_async(request)
        finally:
            auth.acting_token_id.reset(acting)
        try:
            if response.streaming:
                return LineAnswer(400, orjson.dumps({"error": "streamed answers are not available in batches",
                                                     "error_type": "invalid_input"}))
            retry = response.get("Retry-After")
            return LineAnswer(response.status_code, bytes(response.content),
                              float(retry) if retry and retry.replace(".", "", 1).isdigit() else None)
        finally:
            response.close()
