"""SECRET_KEY: the operator's, or one generated once under var/; a weak one refuses to run without DEBUG."""

from __future__ import annotations

import os
import secrets
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
        # O_EXCL: two processes starting at once must agree on one key.
        try:
            fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_urlsafe(50))
        except FileExistsError:
            pass
    var_dir.private_file(key_file)
    return key_file.read_text().strip()


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
