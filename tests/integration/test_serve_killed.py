"""A `manage.py serve` killed with SIGKILL takes its embedded Redis, web server and workers with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hosting import embedded_redis
from tests.stack import ROOT, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.one_phase]


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for init to reap it counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_a_killed_serve_leaves_no_redis_behind(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update(HOSTING_VAR_DIR=str(tmp_path), HOSTING_REQUIRE_API_TOKEN="0")
    serve = subprocess.Popen([sys.executable, "manage.py", "serve", "--workers", "1", "--port", str(free_port())],
                             cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children: list[int] = []
    try:
        wait_until(lambda: embedded_redis.is_running(tmp_path), 90, "serve to start its Redis")
        redis_pid = int((tmp_path / "redis.pid").read_text())
        wait_until(lambda: len([p for p in _children(serve.pid) if p != redis_pid]) >= 2, 30,
                   "serve to start its web server and worker")
        children = [*_children(serve.pid), redis_pid]
        serve.send_signal(signal.SIGKILL)
        serve.wait(10)
        wait_until(lambda: not _alive(redis_pid), 5, "the embedded Redis to end with serve")
        assert not embedded_redis.is_running(tmp_path)
        wait_until(lambda: not any(_alive(p) for p in children), 5, "the web server and worker to end with serve")
    finally:
        if serve.poll() is None:
            serve.kill()
        for pid in children:  # what a failed run left (only processes this test started)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        embedded_redis.stop(tmp_path)


def test_serve_workers_only_starts_its_workers_alone_and_stops_them_on_sigterm(tmp_path: Path) -> None:
    """The image's worker role on a GPU: the workers, supervised, without web server, Redis or migrations."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update(HOSTING_VAR_DIR=str(tmp_path), HOSTING_REQUIRE_API_TOKEN="0")
    serve = subprocess.Popen([sys.executable, "manage.py", "serve", "--workers-only", "--workers", "2"],
                             cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    children: list[int] = []
    try:
        wait_until(lambda: len(_children(serve.pid)) >= 2, 30, "serve to start two workers")
        children = _children(serve.pid)
        assert len(children) == 2
        for pid in children:
            with open(f"/proc/{pid}/cmdline") as handle:
                assert handle.read().split("\0")[-3:-1] == ["runworker", "inference"]
        assert not embedded_redis.is_running(tmp_path)
        serve.send_signal(signal.SIGTERM)
        out, _ = serve.communicate(timeout=60)
        assert serve.returncode == 0
        assert "starting 2 inference worker(s)" in out and "stopped." in out
        assert not any(_alive(p) for p in children)
    finally:
        if serve.poll() is None:
            serve.kill()
        for pid in children:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
