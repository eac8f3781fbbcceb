"""`python -m bench.web_servers`: granian (Rust ASGI server) against uvicorn + httptools on the tiny-model path (issue 26).

One stack (Redis, database, the tiny model's workers); each ASGI server runs the same
application with the same number of processes on its own port, and the levels alternate
between them round by round, so both see the same machine. Reported: requests/s, p50 and
the web processes' CPU per request (the figure issue 26 targets: at most 0.3 ms). granian
is not a requirement of the product: install it for this run only, e.g.
`pip install --target /tmp/granian granian==2.8.7` and `--granian-path /tmp/granian`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import corpus, loadgen
from bench.procstat import CpuMeter
from bench.stack_setup import stopped_on_failure

MODEL = "tiny-bert"


def _granian(stack: Any, port: int, processes: int, path: str) -> subprocess.Popen[bytes]:
    """granian serving the application on port, its package found on path."""
    from tests.stack import ROOT, http_json, wait_until

    env = {**stack.env, "PYTHONPATH": os.pathsep.join(p for p in (path, stack.env.get("PYTHONPATH", "")) if p)}
    command = [sys.executable, "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1", "--port", str(port),
               "--workers", str(processes), "--no-ws", "--loop", "uvloop", "--log-level", "warning",
               "--no-access-log", "hosting.asgi:application"]
    log = open(stack.workdir / "granian.log", "ab")
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: process.poll() is None and http_json("GET", url + "/health", timeout=2)[0] == 200, 60,
               f"granian on {port} (log: {log.name})")
    return process


def main(argv: list[str] | None = None) -> int:
    """Both servers on one stack, levels alternated; the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.web_servers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="1,64")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--processes", type=int, default=2, help="web processes of each server")
    parser.add_argument("--granian-path", default="", help="a directory holding the granian package")
    args = parser.parse_args(argv)
    from tests.model_factory import build_feature_extractor
    from tests.stack import Stack, free_port

    sentences = corpus.build_corpus(1000, 20240611)
    model_dir = build_feature_extractor(Path(tempfile.mkdtemp(prefix="bench-web-")) / "model")
    stack = Stack.create({"HOSTING_TORCH_THREADS": "1"})
    granian = None
    with stopped_on_failure(stack):
        stack.manage("register_model", MODEL, "--source", str(model_dir), "--task", "feature-extraction",
                     "--pooling", "mean", "--normalize", "--max-batch-size", "32", "--max-batch-delay-ms", "5",
                     "--timeout", "60", "--max-queue-size", "4096")
        token = stack.create_token("all")
        stack.start_worker()
        uvicorn_url = stack.start_web(processes=args.processes)
        stack.wait_ready([MODEL])
        port = free_port()
        granian = _granian(stack, port, args.processes, args.granian_path)
    servers = {"uvicorn+httptools": (uvicorn_url, [stack.web[0][0].pid]),
               "granian": (f"http://127.0.0.1:{port}", [granian.pid])}
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    try:
        for round_no in range(args.rounds):
            for level in [int(v) for v in args.levels.split(",")]:
                for name in (list(servers) if round_no % 2 == 0 else list(reversed(servers))):
                    url, pids = servers[name]
                    meter = CpuMeter({"web": pids, "worker": [p.pid for p in stack.workers]})
                    requests = {url: loadgen.inference_requests(url, MODEL, token, sentences)}
                    result, answers = asyncio.run(loadgen.run_level([url], requests, level, 0.5, args.seconds, 10**9,
                                                                    on_window=meter.mark))
                    bad = sum(1 for _, status, _, _ in answers if status != 200)
                    cpu, done = meter.between("start", "end"), max(result.completed, 1)
                    results.setdefault((name, level), []).append({
                        "req_s": result.completed / max(result.window_s, 1e-9),
                        "p50": loadgen.percentile(result.latencies_ms, 50),
                        "web_ms": 1000 * cpu["web"] / done, "worker_ms": 1000 * cpu["worker"] / done, "errors": bad})
    finally:
        if granian is not None:
            granian.terminate()
            granian.wait(30)
        stack.stop()
    print(f"| server ({args.processes} processes) | clients | req/s | p50 ms | web CPU ms/req | worker CPU ms/req | "
          "errors |\n|---|---:|---:|---:|---:|---:|---:|")
    for (name, level), rows in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(f"| {name} | {level} | {med['req_s']:.0f} | {med['p50']:.2f} | {med['web_ms']:.3f} | "
              f"{med['worker_ms']:.3f} | {sum(r['errors'] for r in rows)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
