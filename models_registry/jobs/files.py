"""Batch files in Django's default storage: inputs, per-chunk parts and assembled outputs (sync I/O).

Parts get a fresh name on every attempt, so a chunk redone after a crash never writes over
a committed part; only parts named by committed chunk rows are ever assembled.
"""

from __future__ import annotations

import io
import secrets
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from typing import IO, Any

from django.core.files import File
from django.core.files.base import ContentFile
from django.core.files.storage import storages
from django.utils import timezone

from models_registry.core.conf import conf
from models_registry.models import ApiToken, BatchFile

READ_BLOCK = 256 * 1024


def storage() -> Any:
    """The storage holding batch files (STORAGES["default"])."""
    return storages["default"]


def new_id(prefix: str) -> str:
    """A public id such as file-… or batch_…."""
    return prefix + secrets.token_hex(12)


def expiry(ttl_s: int | None) -> datetime | None:
    """When a file made now expires: after ttl_s, or HOSTING_FILE_RETENTION_S (0: never)."""
    seconds = conf.FILE_RETENTION_S if ttl_s is None else ttl_s
    return timezone.now() + timedelta(seconds=seconds) if seconds > 0 else None


def store_input(upload: File) -> tuple[str, str]:
    """Store a checked input file's bytes: (its public id, its storage name); record_input makes it a file."""
    public_id = new_id("file-")
    upload.seek(0)
    return public_id, storage().save(f"batch-inputs/{public_id}.jsonl", upload)


def record_input(public_id: str, storage_name: str, size: int, filename: str, owner_id: int | None, lines: int,
                 urls: list[str], ttl_s: int | None = None) -> BatchFile:
    """Record stored bytes as the owner's input file (kept ttl_s, or the retention setting): from now on it counts."""
    return BatchFile.objects.create(
        public_id=public_id, owner_id=owner_id, filename=filename[:255] or "input.jsonl", purpose="batch",
        bytes=size, lines=lines, urls=urls, storage_name=storage_name, expires_at=expiry(ttl_s),
    )


def open_file(batch_file: BatchFile) -> IO[bytes]:
    """The stored bytes of a file, for reading."""
    return storage().open(batch_file.storage_name, "rb")


def iter_content(batch_file: BatchFile) -> Iterator[bytes]:
    """The stored bytes of a file in blocks."""
    with open_file(batch_file) as handle:
        while block := handle.read(READ_BLOCK):
            yield block


def write_part(batch_id: str, index: int, kind: str, records: list[bytes]) -> str:
    """Store one chunk's output or error records under a name no other attempt uses; '' if none."""
    if not records:
        return ""
    name = f"batch-jobs/{batch_id}/parts/{index:08d}-{kind}-{secrets.token_hex(4)}.jsonl"
    return storage().save(name, ContentFile(b"".join(records)))


class _Concatenation(io.RawIOBase):
    """A read-only stream over several stored files, one after the other."""

    def __init__(self, names: Iterable[str]) -> None:
        self._names = iter(names)
        self._current: IO[bytes] | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while True:
            if self._current is None:
                name = next(self._names, None)
                if name is None:
                    return 0
                self._current = storage().open(name, "rb")
            data = self._current.read(len(buffer))
            if data:
                buffer[: len(data)] = data
                return len(data)
            self._current.close()
            self._current = None

    def close(self) -> None:
        if self._current is not None:
            self._current.close()
        super().close()


def assemble(batch_id: str, kind: str, part_names: list[str], owner: ApiToken | None, lines: int,
             ttl_s: int | None = None) -> BatchFile | None:
    """One output (or error) file from the committed parts, in chunk order; None when there are none."""
    part_names = [n for n in part_names if n]
    if not part_names:
        return None
    public_id = new_id("file-")
    store = storage()
    size = sum(store.size(n) for n in part_names)
    stream = io.BufferedReader(_Concatenation(part_names), READ_BLOCK)
    try:
        name = store.save(f"batch-jobs/{batch_id}/{kind}-{public_id}.jsonl", File(stream, name=f"{kind}.jsonl"))
    finally:
        stream.close()
    return BatchFile.objects.create(
        public_id=public_id, owner=owner, filename=f"{batch_id}_{kind}.jsonl", purpose="batch_output",
        bytes=size, lines=lines, storage_name=name, expires_at=expiry(ttl_s),
    )


def remove(batch_file: BatchFile) -> None:
    """Delete a file's bytes and its row (a batch's input keeps its row, marked deleted: the batch names it)."""
    delete_quietly([batch_file.storage_name])
    if batch_file.jobs.exists():
        BatchFile.objects.filter(pk=batch_file.pk).update(deleted_at=timezone.now())
    else:
        batch_file.delete()


def delete_quietly(names: Iterable[str]) -> None:
    """Remove stored files that are no longer needed (missing ones are fine)."""
    store = storage()
    for name in names:
        if name:
            try:
                store.delete(name)
            except Exception:
                pass


def leftover_parts(batch_id: str) -> list[str]:
    """Every part stored for a job, committed or left by an attempt that never committed."""
    try:
        _, names = storage().listdir(f"batch-jobs/{batch_id}/parts")
    except (FileNotFoundError, NotImplementedError):
        return []
    return [f"batch-jobs/{batch_id}/parts/{n}" for n in names]
