"""The embedded Redis: started once however many processes ask at the same moment."""

from __future__ import annotations

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
