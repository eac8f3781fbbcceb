"""OpenAI's Files and Batches API over our inference routes (errors in OpenAI's shape).

POST /v1/files takes a JSONL file of requests (purpose `batch`), checked line by line (api.openai.upload_route)
before it is stored; POST /v1/batches runs one through the workers (jobs/driver.py).
A token sees only its own files and batches.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse

from models_registry.api.openai import upload_route
from models_registry.api.pipeline.error_answers import invalid
from models_registry.api.openai.openai_routes import openai_view
from models_registry.core import paths
from models_registry.jobs import files, lines, store
from models_registry.jobs.shapes import list_object
from models_registry.policy import auth
from models_registry.catalog.lookups import fresh_connection

BATCH_FIELDS = ("input_file_id", "endpoint", "completion_window", "metadata", "output_expires_after")
MAX_METADATA = 16


def _db(function: Any) -> Any:
    return sync_to_async(fresh_connection(function))


async def _owner(request: HttpRequest) -> tuple[int | None, auth.TokenGrant | None]:
    call = getattr(request, "api_call", None)
    if call is not None and call.token_checked:  # the front door checked it before the body (/v1/files)
        grant = call.grant
    else:
        grant = await auth.authorize(request.headers.get("Authorization"), None)
    return (grant.token_id if grant else None), grant


def _page_args(request: HttpRequest) -> tuple[str | None, int]:
    raw = request.GET.get("limit", "20")
    try:
        limit = int(raw)
    except ValueError:
        raise invalid(f"'limit' must be an integer from 1 to 100, not {raw!r}", "limit") from None
    if not 1 <= limit <= 100:
        raise invalid(f"'limit' must be from 1 to 100, not {limit}", "limit")
    return request.GET.get("after") or None, limit


@openai_view("POST", "GET")
async def file_collection(request: HttpRequest) -> HttpResponse:
    """POST: upload a batch input file. GET: the token's files."""
    owner_id, grant = await _owner(request)
    if request.method == "POST":
        call = getattr(request, "api_call", None)  # the front door's: the reservation it made before the body
        return await upload_route.store_file(request, grant, call.reservation if call is not None else None)
    after, limit = _page_args(request)
    items, more = await _db(store.list_files)(owner_id, after, limit, request.GET.get("purpose"))
    return JsonResponse(list_object(items, more))


@openai_view("GET", "DELETE")
async def file_detail(request: HttpRequest, file_id: str) -> HttpResponse:
    """GET: one file. DELETE: delete it (its owner only; 409 while a running batch reads it)."""
    owner_id, _ = await _owner(request)
    if request.method == "DELETE":
        return JsonResponse(await _db(store.delete_file)(file_id, owner_id))
    return JsonResponse(await _db(store.file_json)(file_id, owner_id))


async def _blocks(handle: Any) -> AsyncIterator[bytes]:
    try:
        while block := await asyncio.to_thread(handle.read, files.READ_BLOCK):
            yield block
    finally:
        await asyncio.to_thread(handle.close)


@openai_view("GET")
async def file_content(request: HttpRequest, file_id: str) -> HttpResponse:
    """The bytes of a file: an input, or a batch's output or error file (JSONL)."""
    owner_id, _ = await _owner(request)
    batch_file = await _db(store.get_file)(file_id, owner_id)
    handle = await asyncio.to_thread(files.open_file, batch_file)
    response = StreamingHttpResponse(_blocks(handle), content_type="application/jsonl")
    response["Content-Disposition"] = f'attachment; filename="{batch_file.filename}"'
    return response


def _read_batch_request(raw: bytes) -> tuple[str, str, str, dict[str, str] | None, int | None]:
    try:
        body = orjson.loads(raw or b"null")
    except orjson.JSONDecodeError as error:
        raise invalid(f"malformed JSON: {error}", None) from None
    if not isinstance(body, dict):
        raise invalid(f'send a JSON object like {{"input_file_id": "file-…", "endpoint": "{paths.EMBEDDINGS_PATH}", '
                      '"completion_window": "24h"}', None)
    unknown = sorted(set(body) - set(BATCH_FIELDS))
    if unknown:
        raise invalid(f"unrecognized argument(s): {', '.join(unknown)}; this server takes {', '.join(BATCH_FIELDS)}",
                      unknown[0])
    for name in ("input_file_id", "endpoint"):
        if not isinstance(body.get(name), str) or not body[name]:
            raise invalid(f"'{name}' is required (a string)", name)
    window = body.get("completion_window")
    if not isinstance(window, str) or window not in store.WINDOWS:
        raise invalid(f"'completion_window' must be one of {', '.join(store.WINDOWS)}, not {window!r}",
                      "completion_window")
    if not lines.is_served_url(body["endpoint"]):
        raise invalid(f"endpoint {body['endpoint']!r} is not served; use {paths.SERVED_BY_JOBS}", "endpoint")
    metadata = body.get("metadata")
    if metadata is not None and not (
        isinstance(metadata, dict) and len(metadata) <= MAX_METADATA
        and all(isinstance(k, str) and len(k) <= 64 and isinstance(v, str) and len(v) <= 512
                for k, v in metadata.items())
    ):
        raise invalid(f"'metadata' must be an object of at most {MAX_METADATA} string pairs (keys up to 64 "
                      "characters, values up to 512)", "metadata")
    expires = body.get("output_expires_after")
    if expires is not None and not (
        isinstance(expires, dict) and set(expires) == {"anchor", "seconds"} and expires["anchor"] == "created_at"
        and isinstance(expires["seconds"], int) and not isinstance(expires["seconds"], bool)
        and upload_route.TTL_RANGE[0] <= expires["seconds"] <= upload_route.TTL_RANGE[1]
    ):
        raise invalid("'output_expires_after' must be {\"anchor\": \"created_at\", \"seconds\": 3600 to 2592000}",
                      "output_expires_after")
    ttl = expires["seconds"] if expires is not None else None
    return body["input_file_id"], body["endpoint"], window, metadata, ttl


@openai_view("POST", "GET")
async def batch_collection(request: HttpRequest) -> HttpResponse:
    """POST: start a batch over an uploaded file. GET: the token's batches, newest first."""
    owner_id, _ = await _owner(request)
    if request.method == "GET":
        after, limit = _page_args(request)
        items, more = await _db(store.list_jobs)(owner_id, after, limit)
        return JsonResponse(list_object(items, more))
    file_id, endpoint, window, metadata, output_ttl = _read_batch_request(request.body)
    return JsonResponse(await _db(store.create_job)(owner_id, file_id, endpoint, window, metadata, output_ttl))


@openai_view("GET")
async def batch_detail(request: HttpRequest, batch_id: str) -> HttpResponse:
    """One batch with its status and request_counts."""
    owner_id, _ = await _owner(request)
    return JsonResponse(await _db(store.get_job_json)(batch_id, owner_id))


@openai_view("POST")
async def batch_cancel(request: HttpRequest, batch_id: str) -> HttpResponse:
    """Stop a batch: answered lines stay in the output, the rest go to the error file as cancelled."""
    owner_id, _ = await _owner(request)
    return JsonResponse(await _db(store.cancel_job)(batch_id, owner_id))
