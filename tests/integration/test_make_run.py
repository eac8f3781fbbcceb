"""`manage.py serve` (what `make run` runs): starts everything, restarts a dead worker, stops cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from models_registry.capacity import sizing
from tests.stack import ROOT, Stack, free_port, http_json, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.one_phase]


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as handle:
        pairs = [item.decode(errors="replace").partition("=") for item in handle.read().split(b"\0") if item]
    return {key: value for key, _, value in pairs}


def test_serve_registers_the_demo_model_restarts_a_dead_worker_and_stops_everything() -> None:
    stack = Stack.create()  # a database and a broker; serve starts its own web and worker
    port = free_port()
    env = {**stack.env, "PORT": str(port)}
    serve = subprocess.Popen([sys.executable, "manage.py", "serve"], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        credentials = json.loads((stack.workdir / "var" / "credentials.json").read_text()) if wait_until(
            lambda: (stack.workdir / "var" / "credentials.json").exists(), 60, "credentials") else {}
        token = credentials["api_token"]
        wait_until(lambda: http_json("GET", base + "/ready", timeout=2)[0] == 200, 120, "serve to be ready")
        # Several web processes (one per two cores): the one that answered /ready may not be the one that takes
        # the POST, and each reads the workers' states at most HOSTING_CONFIG_REFRESH_S late.
        answers: list[tuple[int, object]] = []
        wait_until(lambda: answers.append(http_json("POST", base + "/models/all-minilm-l6-v2",
                                                    {"inputs": "Django hosts models now."}, token=token)[::2])
                   or answers[-1][0] == 200, 5, "the first answer", interval_s=0.2)
        vector = answers[-1][1]
        assert len(vector) == 384 and abs(sum(x * x for x in vector) - 1) < 1e-4

        layout = sizing.default_layout(sizing.available_cores(), os.environ.get("HOSTING_DEVICE", "cpu"))
        workers = [p for p in _children(serve.pid) if "runworker" in _cmdline(p)]
        assert len(workers) == layout.workers
        if "HOSTING_TORCH_THREADS" not in os.environ:
            assert all(_environ(p).get("HOSTING_TORCH_THREADS") == str(layout.threads) for p in workers)
        os.kill(workers[0], signal.SIGKILL)
        wait_until(lambda: len([p for p in _children(serve.pid) if "runworker" in _cmdline(p) and p != workers[0]])
                   == layout.workers, 30, "the supervisor to start a new worker")
        wait_until(lambda: http_json("POST", base + "/models/all-minilm-l6-v2", {"inputs": "again"},
                                     token=token, timeout=10)[0] == 200, 120, "serving again after the restart")
        children = _children(serve.pid)
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(90) == 0
        assert all(not _cmdline(p) for p in children), "every process serve started has exited"
    finally:
        if serve.poll() is None:
            serve.kill()
        stack.stop()
