"""A token's storage quota for Files API uploads: the bytes of the files it keeps.

HOSTING_FILE_STORAGE_BYTES per token (0: none). Every file the token owns counts (its
uploads and its batches' output and error files) until it is deleted or expires, and so
does the output a running batch of it has committed so far (its chunks' parts, assembled
into those files when it ends). An upload that could never fit is a 413; one that does
not fit beside the files kept is a 429 whose Retry-After is when the token's first file
expires. A batch's next chunk of output that does not fit stops the batch (jobs.output_quota).
"""

from __future__ import annotations

import math

from django.db.models import Min, Q, Sum
from django.utils import timezone

from models_registry.core.conf import conf
from models_registry.core.errors import StorageQuotaFull, TooLarge
from models_registry.models import BatchChunk, BatchFile, BatchJob

NO_EXPIRY_RETRY_S = 3600  # nothing of the token's expires: ask again in an hour (or delete files)


def _kept(owner_id: int) -> tuple[int, float | None]:
    """(bytes the owner keeps, seconds until its first file expires or None)."""
    now = timezone.now()
    live = BatchFile.objects.filter(owner_id=owner_id, deleted_at__isnull=True).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=now))
    found = live.aggregate(total=Sum("bytes"), first=Min("expires_at"))
    running = BatchChunk.objects.filter(job__owner_id=owner_id, job__status__in=BatchJob.ACTIVE).aggregate(
        total=Sum("bytes"))  # a running batch's output, not yet a file
    first = found["first"]
    kept = int(found["total"] or 0) + int(running["total"] or 0)
    return kept, (first - now).total_seconds() if first else None


def check(owner_id: int | None, adding: int, reserved: int | None = None) -> None:
    """Raise TooLarge or StorageQuotaFull (a 429) if owner may not keep adding more bytes (runs in a thread: it queries).

    reserved: the bytes every upload of the owner in flight holds, this one's included
    (policy.upload_reservations, read before the files kept are); None: this one alone.
    """
    quota = conf.FILE_STORAGE_BYTES
    if owner_id is None or quota <= 0:
        return
    if adding > quota:
        raise TooLarge(f"the upload is {adding} bytes; this API token may keep at most {quota} bytes of files "
                       "(HOSTING_FILE_STORAGE_BYTES)")
    kept, first_expiry_s = _kept(owner_id)
    held = adding if reserved is None else max(reserved, adding)
    if kept + held > quota:
        retry = NO_EXPIRY_RETRY_S if first_expiry_s is None else max(1, math.ceil(first_expiry_s))
        uploading = f" and {held - adding} more are being uploaded" if held > adding else ""
        raise StorageQuotaFull(
            f"storage quota reached: this API token keeps {kept} bytes of files{uploading} and may keep {quota}; "
            f"delete files (DELETE /v1/files/{{file_id}}) or retry in {retry} s, when the first one expires",
            headers={"Retry-After": str(retry)},
        )


def check_output(owner_id: int | None, adding: int, reserved: int | None = None) -> None:
    """Raise StorageQuotaFull if a batch of owner's may not add adding bytes of output (runs in a thread: it queries).

    reserved: as for check, the bytes every upload or batch chunk of the owner in flight holds, these included.
    """
    quota = conf.FILE_STORAGE_BYTES
    if owner_id is None or quota <= 0:
        return
    kept, _ = _kept(owner_id)
    held = adding if reserved is None else max(reserved, adding)
    if kept + held > quota:
        pending = f" and {held - adding} more are being written" if held > adding else ""
        raise StorageQuotaFull(f"storage quota reached: the batch's next {adding} bytes of output do not fit beside the "
                          f"{kept} bytes of files this API token keeps{pending} (at most {quota}, "
                          "HOSTING_FILE_STORAGE_BYTES)")
