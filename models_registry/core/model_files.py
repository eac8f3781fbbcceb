"""Reading a model directory's files, local or on the hub (`revision` honoured): what core.model_layout parses.

The same reading serves a registration (a hub id from this machine's cache only: no network on the web
side) and the worker's load (the hub itself, as transformers loads the weights).
"""

from __future__ import annotations

import os
from collections.abc import Callable

FileReader = Callable[[str], "str | None"]


class FilesNotCached(OSError):
    """A hub repository's file is not in this machine's cache (cached_only reading)."""


def file_reader(source: str, revision: str | None = None, cached_only: bool = False) -> FileReader:
    """path -> the file's text, None when the directory or repository has no such file."""
    def read(path: str) -> str | None:
        found = file_path(source, revision, path, cached_only)
        if found is None:
            return None
        with open(found, encoding="utf-8") as handle:
            return handle.read()
    return read


def file_path(source: str, revision: str | None, path: str, cached_only: bool = False) -> str | None:
    """A local path to one file of a directory or hub repository (downloaded), None when it has no such file."""
    local = os.path.expanduser(source)
    if os.path.isdir(local):
        full = os.path.join(local, path)
        return full if os.path.isfile(full) else None
    from huggingface_hub import hf_hub_download, try_to_load_from_cache
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    if cached_only:
        cached = try_to_load_from_cache(source, path, revision=revision or None)
        if cached is None:
            raise FilesNotCached(f"{source}: {path} is not in this machine's hub cache")
        return cached if isinstance(cached, str) else None  # else: the cache knows there is no such file
    try:
        return hf_hub_download(repo_id=source, filename=path, revision=revision or None)
    except LocalEntryNotFoundError:  # the hub unreachable and nothing cached: not "no such file"
        raise
    except EntryNotFoundError:
        return None


