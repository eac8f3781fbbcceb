"""Where a model's weights come from (a hub id or a local directory), and what API clients may see of it."""

from __future__ import annotations

import re
from pathlib import Path

# The hub's own rule: "name" or "namespace/name", letters, digits, "-", "_", ".", at most 96
# characters, neither end a "-" or ".", no "--" or "..".
_HUB_ID = re.compile(r"^(?:[A-Za-z0-9](?:[\w.-]{0,94}[A-Za-z0-9_])?/)?[A-Za-z0-9](?:[\w.-]{0,94}[A-Za-z0-9_])?$")
LOCAL_PREFIXES = ("/", "./", "~")
HIDDEN_SOURCE = "(local directory)"
LOAD_FAILED = "failed to load; an operator can see why in the admin"


def is_hub_id(source: str) -> bool:
    """Whether source is shaped like a hub id (such as google-bert/bert-base-uncased)."""
    return (len(source) <= 96 and bool(_HUB_ID.match(source)) and "--" not in source and ".." not in source
            and not source.endswith(".git"))


def looks_local(source: str) -> bool:
    """Whether source names a local directory: an absolute path, ./relative or ~user."""
    return source.startswith(LOCAL_PREFIXES)


def source_problem(source: str) -> str | None:
    """Why source can be neither loaded from disk nor from the hub (None when it can)."""
    if ".." in Path(source).parts:
        return f"{source!r} climbs out of its directory with '..': give the absolute path of the model directory."
    if looks_local(source):
        if not Path(source).expanduser().is_dir():
            return f"Local directory {source!r} does not exist on this machine."
        return None
    if not is_hub_id(source):
        return (f"{source!r} is neither a hub id (name or namespace/name) nor a local directory "
                "(give local directories as an absolute path, ./relative or ~/path).")
    return None


def public_source(source: str) -> str:
    """What API clients see of a source: hub ids as they are, never a path of this machine."""
    return source if is_hub_id(source) and not looks_local(source) else HIDDEN_SOURCE
