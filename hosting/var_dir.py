"""The install's data directory (var/): private to the user running the server.

It holds the generated SECRET_KEY, the embedded SQLite database (sessions and token
hashes), the embedded Redis socket and the batch files: nobody else on the machine
should read them, so the directory is 0700 and the secret files 0600, also when an
older install created them with the default umask.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def prepare(var_dir: Path) -> None:
    """Create var_dir as 0700, or take group/other access away from one this user owns."""
    var_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    _owner_only(var_dir, 0o700)


def private_file(path: Path) -> None:
    """Create path empty as 0600 unless it exists; take group/other access away if this user owns it.

    An empty file is a valid new SQLite database, so creating it first decides its mode
    (SQLite gives its -wal and -shm files the database file's mode).
    """
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
    _owner_only(path, 0o600)


def _owner_only(path: Path, mode: int) -> None:
    info = path.stat()
    if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & 0o077:
        path.chmod(mode)
