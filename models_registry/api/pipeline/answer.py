"""What a route answers, before any server writes it: status, headers and body bytes (or a stream of events).

Routes build an Answer; the API's ASGI handler writes it straight to the connection and
Django's views turn it into an HttpResponse (to_django), so one route serves both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from django.http import HttpResponse, StreamingHttpResponse

JSON = "application/json"


def dump_json(data: Any) -> bytes:
    """JSON bytes; float32 arrays as their shortest round-tripping numbers.

    orjson writes a numpy float32 array directly, an order of magnitude faster than
    json.dumps of a float list, and in half the bytes (float32 values need 9 digits, not
    float64's 17).
    """
    return orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY)


@dataclass
class Answer:
    """One HTTP answer: body bytes, or events (a stream) sent as they come."""

    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = JSON
    events: AsyncIterator[bytes] | None = None


def json_answer(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Answer:
    """An application/json answer encoded by dump_json."""
    return Answer(status, dump_json(data), dict(headers or {}))


class PlainText(str):
    """A route's body sent as text/plain, not JSON (a transcription's response_format "text")."""


def body_answer(data: Any, headers: dict[str, str] | None = None) -> Answer:
    """A 200 with data as the body: text/plain for PlainText, else JSON."""
    if isinstance(data, PlainText):
        return Answer(200, data.encode(), dict(headers or {}), content_type="text/plain; charset=utf-8")
    return json_answer(data, 200, headers)


def to_django(answer: Answer) -> HttpResponse:
    """The same answer as a Django response (for the views Django's handler serves)."""
    response: HttpResponse
    if answer.events is not None:
        response = StreamingHttpResponse(answer.events, status=answer.status, content_type=answer.content_type)
    else:
        response = HttpResponse(answer.body, status=answer.status, content_type=answer.content_type)
    for name, value in answer.headers.items():
        response[name] = value
    return response
