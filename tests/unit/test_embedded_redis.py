"""The embedded Redis: started once however many processes ask at the same moment."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import redis

from hosting import embedded_redis


def test_concurrent_starts_start_one_server_and_stop_ends_it(tmp_path: Path) -> None:
    results: list[bool] = []
    threads = [threading.Thread(target=lambda: results.append(embedded_redis.ensure_running(tmp_path)))
               for _ in range(4)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(results) == [False, False, False, True]
        assert embedded_redis.is_running(tmp_path)
        assert embedded_redis.url(tmp_path) == f"unix://{tmp_path / 'redis.sock'}"
        client = redis.Redis.from_url(embedded_redis.url(tmp_path))
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "volatile-lru"}
        client.close()
    finally:
        embedded_redis.stop(tmp_path)
    deadline = time.monotonic() + 5
    while embedded_redis.is_running(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not embedded_redis.is_running(tmp_path)


def test_a_server_left_by_a_dead_serve_is_replaced(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        assert embedded_redis.ensure_running(tmp_path)  # a daemon, as an older serve (or another OS) left it
        left = int((tmp_path / "redis.pid").read_text())
        (tmp_path / "redis.owner").write_text(str(dead.pid))
        assert embedded_redis.ensure_running(tmp_path, tie_to_parent=True)  # stopped, and a tied one started
        tied = int((tmp_path / "redis.pid").read_text())
        assert tied != left and embedded_redis.is_running(tmp_path)
        assert int((tmp_path / "redis.owner").read_text()) == os.getpid()
        assert not embedded_redis.ensure_running(tmp_path, tie_to_parent=True)  # its owner lives: kept
    finally:
        embedded_redis.stop(tmp_path)
