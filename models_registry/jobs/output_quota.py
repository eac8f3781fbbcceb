"""A batch's output held to its owner's storage quota before it is written, a chunk at a time.

Outputs used to be counted only once assembled: three jobs of 49 KB inputs left 3.14 MB of outputs against a
200 KB HOSTING_FILE_STORAGE_BYTES. Now each chunk's records reserve their bytes as an upload does
(policy.upload_reservations: under the owner's lock, beside the files it keeps, its uploads in flight and
the output its running batches have committed) before its parts are written, and count as kept once the
chunk is committed. A chunk that does not fit stops the job: the chunks committed before it are its output.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager, nullcontext, suppress
from typing import Any

from asgiref.sync import sync_to_async

from models_registry.catalog.lookups import fresh_connection
from models_registry.core.errors import RateLimited, StorageQuotaFull
from models_registry.jobs.chunks import ChunkOutcome
from models_registry.policy import file_quota, upload_reservations

CODE = "storage_quota_exceeded"
LOCK_RETRY_S = 0.2


class OverQuota(Exception):
    """A batch's next output does not fit its owner's storage quota: the job stops at line."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.message = message
        self.line = line

    def record(self, written: bool = True) -> dict[str, Any]:
        """The job's errors entry (OpenAI's errors.data): what stopped it and which lines it did not get to."""
        fate = "were not run" if written else "were not written to the error file"
        return {"code": CODE, "message": f"{self.message}; the requests from line {self.line} on {fate} (the lines "
                f"before are in the output and error files): delete files (DELETE /v1/files/{{file_id}}), then run "
                "the rest in a new batch", "line": self.line, "param": None}


def size(outcome: ChunkOutcome) -> int:
    """The bytes a chunk's parts will hold."""
    return sum(map(len, outcome.output)) + sum(map(len, outcome.errors))


async def hold(owner_id: int | None, field: str, adding: int, line: int) -> bool:
    """Reserve adding bytes of output under field; whether anything is held. OverQuota (at line) if they do not fit."""
    if owner_id is None or not upload_reservations.enabled():
        return False
    check = sync_to_async(fresh_connection(file_quota.check_output))
    while True:
        try:
            await upload_reservations.hold(owner_id, field, adding, check)
            return True
        except StorageQuotaFull as error:
            raise OverQuota(error.message, line) from None
        except RateLimited:  # the owner's other checks held its lock past their wait: a job waits its turn
            await asyncio.sleep(LOCK_RETRY_S)


def settled(owner_id: int | None, field: str, held: bool) -> AbstractAsyncContextManager[None]:
    """Around the chunk's commit: from then on its bytes count as kept, and its reservation goes (one step)."""
    return upload_reservations.settling(owner_id, field) if held and owner_id is not None else nullcontext()


async def release(owner_id: int | None, field: str, held: bool) -> None:
    """Drop the reservation of a chunk that was not committed (nothing of it is kept)."""
    if held and owner_id is not None:
        with suppress(Exception):
            await upload_reservations.release(owner_id, field)
