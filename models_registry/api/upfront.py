"""Refusals the API handler gives from a request's headers alone, before it reads any of the body.

- A Content-Length that is not a decimal number is a 400 (Django would take it for 0, and
  the files route raised on it: a 500).
- /v1/files takes bodies of up to HOSTING_BATCH_MAX_FILE_BYTES: without a valid token the
  401 comes before any of them is read (it read a whole 150 MB upload first); an upload
  over the token's storage quota (policy.file_quota) or past its requests_per_minute is
  refused the same way, and one let through is counted as a request of the token and
  holds its declared bytes of the quota until it is answered (policy.upload_reservations).
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.http import HttpResponse

from models_registry.api.call import ApiCall
from models_registry.api.error_answers import error_response_for
from models_registry.catalog.lookups import fresh_connection
from models_registry.core import paths
from models_registry.core.errors import HostingError, InvalidInput
from models_registry.policy import auth, file_quota, gate, upload_reservations

AUTH_FIRST = (paths.FILES_PREFIX,)  # routes with large bodies: the token is checked before the body is read
UPLOADS = paths.FILES_PREFIX  # an upload is also held to the storage quota and charged before it is read


def _check_length(call: ApiCall) -> None:
    length = call.content_length
    if length is not None and not length.strip().isdigit():
        raise InvalidInput(f"malformed Content-Length header {length[:40]!r}: send the body's size in bytes")


async def _admit_upload(call: ApiCall, grant: auth.TokenGrant | None) -> None:
    """An upload fits the token's storage quota (by its Content-Length) and is charged as one request."""
    if grant is None:
        return
    declared = call.content_length
    adding = int(declared) if declared and declared.strip().isdigit() else 0
    if upload_reservations.enabled():  # reserved before the files kept are read: uploads side by side add up
        await upload_reservations.hold(grant.token_id, call.request_id, adding,
                                       sync_to_async(fresh_connection(file_quota.check)))
        call.reservation = (grant.token_id, call.request_id)
    try:
        await gate.charge_only(grant=grant, inputs=[])  # 429 when its requests_per_minute are spent
    except BaseException:
        if call.reservation is not None:
            await upload_reservations.release(*call.reservation)
            call.reservation = None
        raise


async def refusal(call: ApiCall) -> HttpResponse | None:
    """The answer to a request its headers already rule out, or None to read its body and serve it."""
    try:
        _check_length(call)
        if call.path.startswith(AUTH_FIRST):
            grant = await auth.authorize(call.authorization, None)
            if call.method == "POST" and call.path.rstrip("/") == UPLOADS:
                await _admit_upload(call, grant)
    except HostingError as error:
        return error_response_for(call.path, error, call.request_id)
    return None
