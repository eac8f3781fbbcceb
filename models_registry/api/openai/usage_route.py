"""GET /v1/usage: the calling token's own usage ledger rows (observe.ledger), and how the OpenAPI document shows it."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal, NotRequired

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict

from models_registry.api.pipeline.error_answers import invalid
from models_registry.api.openai.openai_routes import openai_view
from models_registry.api.pipeline.request_record import grant_id
from models_registry.catalog.lookups import fresh_connection
from models_registry.observe import ledger_report
from models_registry.policy import auth

API_GROUPS = ("model", "version", "hour")  # a token sees its own rows: never grouped by token
MAX_SECONDS = 253_402_300_799  # 9999-12-31T23:59:59Z: past it a number is no time (and no database integer)


def _seconds(request: HttpRequest, name: str, default: int) -> int:
    raw = request.GET.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise invalid(f"'{name}' must be unix seconds (an integer), not {raw!r}", name) from None
    if not 0 <= value <= MAX_SECONDS:
        raise invalid(f"'{name}' must be unix seconds from 0 to {MAX_SECONDS}, not {value}", name)
    return value


def _group_by(request: HttpRequest) -> list[str]:
    """group_by as OpenAI's usage API sends it (group_by[]=model&group_by[]=hour) or as one comma list."""
    asked = [part for value in request.GET.getlist("group_by") + request.GET.getlist("group_by[]")
             for part in value.split(",")]
    unknown = [g for g in asked if g not in API_GROUPS]
    if unknown:
        raise invalid(f"'group_by' takes a comma list of {', '.join(API_GROUPS)}, not "
                      f"{', '.join(map(repr, unknown))}", "group_by")
    return asked or ["model"]


@openai_view("GET")
async def usage(request: HttpRequest) -> HttpResponse:
    """The calling token's usage per model (and, as grouped, version and hour) over start_time..end_time."""
    grant = await auth.authorize(request.headers.get("Authorization"), None)
    start = _seconds(request, "start_time", 0)
    end = _seconds(request, "end_time", int(time.time()) + 1)
    groups = _group_by(request)
    data = [] if end <= start else await sync_to_async(fresh_connection(ledger_report.rows))(
        [grant_id(grant)], start, end, groups)  # an empty range holds no hour
    return JsonResponse({"object": "list", "data": data})


OPEN = ConfigDict(extra="allow")
Count = Annotated[int, Field(ge=0)]


@with_config(OPEN)
class UsageRow(TypedDict):
    """The token's use of one model (one version, one hour, as grouped) over the range."""

    model: Annotated[str | None, Field(description="null when not grouped by model")]
    version: NotRequired[Annotated[int, Field(description="grouped by version: the version that answered (0: "
                                                          "a model without versions)")]]
    start_time: NotRequired[Annotated[int, Field(description="grouped by hour: the UTC hour's start, unix seconds")]]
    end_time: NotRequired[Annotated[int, Field(description="grouped by hour: its end, unix seconds")]]
    requests: Annotated[Count, Field(description="requests that reached the model, answered or failed")]
    input_tokens: Count
    output_tokens: Annotated[Count, Field(description="generated tokens")]
    compute_seconds: Annotated[float, Field(description="the requests' share of their batches' compute (a "
                                                        "stream: its time generating after its first token)")]
    errors: Annotated[Count, Field(description="requests answered with an error")]
    images: Count
    audio_seconds: float


@with_config(OPEN)
class UsageList(TypedDict):
    """GET /v1/usage."""

    object: Literal["list"]
    data: list[UsageRow]


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema}


PARAMETERS = (
    _query("start_time", "unix seconds: hours ending after it count (default: from the first)",
           {"type": "integer", "minimum": 0, "maximum": MAX_SECONDS}),
    _query("end_time", "unix seconds: hours starting before it count (default: now)",
           {"type": "integer", "minimum": 0, "maximum": MAX_SECONDS}),
    _query("group_by", "model (default), version, hour: a comma list, or repeated",
           {"type": "string", "pattern": r"^(model|version|hour)(,(model|version|hour))*$"}),
)


def operation(operation_class: Any) -> Any:
    """The route as api.openapi.openapi's Operation (its class passed in, as batch_schemas does)."""
    return operation_class("openai-usage", "get", "The calling token's own usage: requests, tokens, compute seconds "
                           "and errors per model (and version, hour), flushed from the web every few seconds.",
                           UsageList, (400, 401, 405, 500), parameters=PARAMETERS, tags=("usage",), openai=True)
