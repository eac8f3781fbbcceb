"""SECRET_KEY: the operator's, or one generated once under var/; a weak one refuses to run without DEBUG."""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

from hosting import var_dir

MIN_LENGTH = 32
# Placeholders seen in examples and tutorials: a deployment that kept one signs its sessions
# with a key anybody can read.
PLACEHOLDERS = ("change-me", "changeme", "change_me", "replace-me", "example", "your-secret", "secret-key",
                "django-insecure")
GENERATE = "python3 -c 'import secrets; print(secrets.token_urlsafe(50))'"


def load(var: Path, configured: str) -> str:
    """configured when set, else the key kept in var/secret_key (created 0600 on first use)."""
    if configured:
        return configured
    var_dir.prepare(var)
    key_file = var / "secret_key"
    if not key_file.exists():
        _create(key_file)
    var_dir.private_file(key_file)
    return key_file.read_text().strip()


def _create(key_file: Path) -> None:
    """Write a new key beside key_file and link it into place whole.

    Two processes starting at once must agree on one key, and neither may read a file still being
    written: the key is complete in its temporary file before os.link makes it key_file, and a
    link that finds key_file already there leaves the other process's key.
    """
    fd, temporary = tempfile.mkstemp(prefix=".secret_key.", dir=key_file.parent)  # 0600
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(50))
        try:
            os.link(temporary, key_file)
        except FileExistsError:
            pass
    finally:
        os.unlink(temporary)


def weakness(key: str) -> str | None:
    """Why key is unfit to sign sessions in production (None when it is fit)."""
    lowered = key.lower()
    for placeholder in PLACEHOLDERS:
        if placeholder in lowered:
            return f"contains the placeholder {placeholder!r}"
    if len(key) < MIN_LENGTH:
        return f"is {len(key)} characters long (at least {MIN_LENGTH} are needed)"
    if len(set(key)) < 10:
        return f"uses only {len(set(key))} distinct characters"
    return None


def refusal(key: str) -> str | None:
    """The message a server with DEBUG off stops with when key is weak (None when it is fit)."""
    why = weakness(key)
    if why is None:
        return None
    return (f"SECRET_KEY {why}. With DEBUG off the server refuses to start on it: set SECRET_KEY to a long "
            f"random string ({GENERATE}), or unset it to have one generated and kept under var/.")
