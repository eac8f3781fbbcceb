"""POST /v1/files, the upload, in the order the front door runs it: admit, store_file, release.

- `admit`, before the body (api.server.before_body): the declared bytes are reserved of the token's storage
  quota (policy.upload_reservations), so uploads side by side add up, and the upload is charged as
  one request (policy.gate); the Reservation, a value, travels on the call;
- `store_file`, the view's (api.openai.batch_routes' file_collection): the body read and every line checked,
  the reservation handed to it adjusted to the file's real size (the quota checked again: a chunked
  upload declared none), the file stored and kept, its record and the reservation's drop one step
  under the token's lock; a view called without the front door holds a reservation of its own;
- `release`, after the answer (api.server.front_door): whatever is still held goes (an error, a
  disconnect; a file kept already left nothing to drop).
"""

from __future__ import annotations

import uuid
from contextlib import nullcontext
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError

from models_registry.api.pipeline.call import ApiCall
from models_registry.api.pipeline.error_answers import invalid
from models_registry.catalog import lookups
from models_registry.catalog.lookups import fresh_connection
from models_registry.core.conf import conf
from models_registry.core.errors import TooLarge
from models_registry.jobs import files, lines, store
from models_registry.jobs.targets import route_check
from models_registry.policy import auth, file_quota, gate, upload_reservations
from models_registry.policy.upload_reservations import Reservation

MULTIPART_OVERHEAD = 64 * 1024  # form boundaries and headers around an uploaded file
TTL_RANGE = (3600, 2_592_000)  # expires_after / output_expires_after seconds, as OpenAI takes them


def _db(function: Any) -> Any:
    return sync_to_async(fresh_connection(function))


async def admit(call: ApiCall, grant: auth.TokenGrant | None) -> Reservation | None:
    """Before the body: the upload fits the token's storage quota (by its Content-Length) and is charged as one request.

    Its Reservation (None: no token, or no quota), held until `release`; raises the refusal (413, 429).
    """
    if grant is None:
        return None
    declared = call.content_length
    adding = int(declared) if declared and declared.strip().isdigit() else 0
    reservation = None
    if upload_reservations.enabled():  # reserved before the files kept are read: uploads side by side add up
        await upload_reservations.hold(grant.token_id, call.request_id, adding, _db(file_quota.check))
        reservation = Reservation(grant.token_id, call.request_id, adding)
    try:
        gate.count_alone(await gate.admit(gate.Ask(grant, [])))  # 429 when its requests_per_minute are spent
    except BaseException:
        if reservation is not None:
            await release(reservation)
        raise
    return reservation


async def release(reservation: Reservation) -> None:
    """After the answer: drop what the upload still holds (nothing once its file is kept)."""
    await upload_reservations.release(reservation.owner_id, reservation.field)


def _expires_after(post: Any) -> int | None:
    """The upload's expires_after[seconds] (OpenAI's form fields), checked; None when not sent."""
    anchor, seconds = post.get("expires_after[anchor]"), post.get("expires_after[seconds]")
    if anchor is None and seconds is None:
        return None
    if anchor != "created_at":
        raise invalid(f"'expires_after[anchor]' must be 'created_at', not {anchor!r}", "expires_after")
    if seconds is None or not seconds.isdigit() or not TTL_RANGE[0] <= int(seconds) <= TTL_RANGE[1]:
        raise invalid(f"'expires_after[seconds]' must be an integer from {TTL_RANGE[0]} to {TTL_RANGE[1]}, not "
                      f"{seconds!r}", "expires_after")
    return int(seconds)


def _checked_upload(request: HttpRequest, check: lines.RouteCheck) -> tuple[Any, lines.FileSummary, int | None]:
    """Parse the multipart body and check every line (runs in a thread: files can be large)."""
    try:
        post, uploads = request.POST, request.FILES
    except MultiPartParserError as error:
        raise invalid(f"malformed multipart body: {error}", "file") from None
    purpose = post.get("purpose")
    if purpose != "batch":
        raise invalid(f"'purpose' must be 'batch' (this server keeps batch input files only), not {purpose!r}",
                      "purpose")
    ttl = _expires_after(post)
    upload = uploads.get("file")
    if upload is None:
        raise invalid("a 'file' part is required: the JSONL file of requests", "file")
    limit = conf.BATCH_MAX_FILE_BYTES
    if upload.size > limit:
        raise TooLarge(f"the file is {upload.size} bytes; the limit is {limit} (HOSTING_BATCH_MAX_FILE_BYTES)")
    upload.seek(0)
    cap = conf.MAX_BODY_BYTES
    summary = lines.scan(lines.read_lines(upload, cap), max_line_bytes=cap,
                         max_lines=conf.BATCH_MAX_LINES, check=check)
    return upload, summary, ttl


async def store_file(request: HttpRequest, grant: auth.TokenGrant | None,
                     reservation: Reservation | None) -> HttpResponse:
    """The uploaded file checked, stored and kept; its answer the file object. reservation: admit's, if it ran."""
    owner_id = grant.token_id if grant else None
    limit = conf.BATCH_MAX_FILE_BYTES
    raw_length = request.META.get("CONTENT_LENGTH") or "0"
    if not raw_length.isdigit():  # the API handler refuses these first; a view may be called without it
        raise invalid(f"malformed Content-Length {raw_length!r}", None)
    length = int(raw_length)
    if length > limit + MULTIPART_OVERHEAD:  # the multipart envelope around the file is small
        raise TooLarge(f"the upload is {length} bytes; a batch file may be at most {limit} bytes "
                       "(HOSTING_BATCH_MAX_FILE_BYTES)")
    if not (request.content_type or "").startswith("multipart/form-data"):
        raise invalid("send multipart/form-data with a 'file' part and purpose=batch", "file")
    check = route_check(await lookups.get_specs(), grant)
    # Not the ORM's thread: checking a big file must not hold up the token lookups.
    upload, summary, ttl = await sync_to_async(_checked_upload, thread_sensitive=False)(request, check)
    field = reservation.field if reservation is not None else f"route-{uuid.uuid4().hex}"
    reserving = owner_id is not None and upload_reservations.enabled()
    size, filename = upload.size or 0, upload.name or "input.jsonl"
    try:
        if reserving:  # the quota again with the file's real size, held in the reservation made before the body
            await upload_reservations.hold(owner_id, field, size, _db(file_quota.check))
        public_id, storage_name = await _db(files.store_input)(upload)
    except BaseException:
        if reserving and reservation is None:  # the front door's own goes after the answer
            await upload_reservations.release(owner_id, field)
        raise
    finally:
        upload.close()
    # The file becomes kept and stops being reserved in one step under the token's lock: a check of another
    # upload between the two would count it twice.
    async with upload_reservations.settling(owner_id, field) if reserving else nullcontext():
        saved = await _db(files.record_input)(public_id, storage_name, size, filename, owner_id, summary.lines,
                                              summary.urls, ttl)
    return JsonResponse(await _db(store.file_json)(saved.public_id, owner_id))
