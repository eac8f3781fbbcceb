"""`python -m bench.curves`: the cost curve (throughput and p99 against input length and
concurrency) and the memory one loaded model costs a worker; a table and an SVG plot."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from pathlib import Path
from typing import Any

from bench import corpus, loadgen
from bench.svgplot import line_chart

ROOT = Path(__file__).resolve().parent.parent
MODEL = "all-minilm-l6-v2"


def rss_mib(pid: int) -> float:
    """Resident memory of a process, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def fixed_length(words: int, count: int, seed: int) -> list[str]:
    """count distinct sentences of exactly `words` words."""
    rng = random.Random(seed + words)
    return [f"{i} {corpus._sentence(rng, words)}" for i in range(count)]


def main(argv: list[str] | None = None) -> int:
    """Run the curves and print/write the results."""
    parser = argparse.ArgumentParser(prog="python -m bench.curves", description=__doc__)
    parser.add_argument("--lengths", default="8,16,32,64,128", help="words per input")
    parser.add_argument("--levels", default="1,8,32,64", help="client concurrencies")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--out", default=str(ROOT / "bench-results"))
    parser.add_argument("--svg", default=str(ROOT / "docs" / "cost-curve.svg"))
    args = parser.parse_args(argv)
    lengths = [int(v) for v in args.lengths.split(",")]
    levels = [int(v) for v in args.levels.split(",")]
    sys.path.insert(0, str(ROOT))
    from models_registry.capacity import sizing
    from tests.model_factory import minilm_path
    from tests.stack import Stack, wait_until

    layout = sizing.default_layout(sizing.available_cores())  # what `make run` starts here
    stack = Stack.create({"HOSTING_TORCH_THREADS": str(layout.threads)})
    try:
        stack.manage("register_model", MODEL, "--source", str(minilm_path()), "--task", "feature-extraction",
                     "--pooling", "mean", "--normalize", "--max-batch-size", "32", "--timeout", "60")
        token = stack.create_token("all")
        # A worker that holds no model: the baseline for the memory one model costs.
        idle = stack.start_worker(env={"HOSTING_WORKER_MODELS": "none-such"})
        worker = stack.start_worker()
        for _ in range(layout.workers - 1):
            stack.start_worker()
        url = stack.start_web()
        stack.wait_ready([MODEL])
        wait_until(lambda: rss_mib(idle.pid) > 100, 60, "the idle worker to import torch")
        memory = {"worker_without_model_mib": round(rss_mib(idle.pid), 1),
                  "worker_with_model_mib": round(rss_mib(worker.pid), 1)}
        memory["one_model_mib"] = round(memory["worker_with_model_mib"] - memory["worker_without_model_mib"], 1)
        rows: list[dict[str, Any]] = []
        for words in lengths:
            sentences = fixed_length(words, 400, seed=7)
            requests = {url: loadgen.inference_requests(url, MODEL, token, sentences)}
            for level in levels:
                result, _ = asyncio.run(loadgen.run_level([url], requests, level, 1.0, args.seconds, 10**9))
                lat = result.latencies_ms
                rows.append({"words": words, "concurrency": level, "req_s": round(result.completed / max(result.window_s, 1e-9), 1),
                             "p50_ms": round(loadgen.percentile(lat, 50), 1), "p99_ms": round(loadgen.percentile(lat, 99), 1),
                             "errors": result.errors})
                print(rows[-1], flush=True)
    finally:
        stack.stop()
    table = ["| words per input | clients | req/s | p50 ms | p99 ms | errors |", "|---:|---:|---:|---:|---:|---:|"]
    table += [f"| {r['words']} | {r['concurrency']} | {r['req_s']} | {r['p50_ms']} | {r['p99_ms']} | {r['errors']} |"
              for r in rows]
    table.append("")
    table.append(f"Memory: a worker with torch but no model {memory['worker_without_model_mib']} MiB; "
                 f"with all-MiniLM-L6-v2 loaded {memory['worker_with_model_mib']} MiB "
                 f"(one model: {memory['one_model_mib']} MiB).")
    text = "\n".join(table)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "curves.json").write_text(json.dumps({"rows": rows, "memory": memory}, indent=2))
    (out / "curves.md").write_text(text + "\n")
    series = {f"{c} clients": [(r["words"], r["req_s"]) for r in rows if r["concurrency"] == c] for c in levels}
    Path(args.svg).parent.mkdir(parents=True, exist_ok=True)
    Path(args.svg).write_text(line_chart(series, "words per input", "requests/s",
                                         "all-MiniLM-L6-v2 through HTTP, 2-core CPU"))
    return 1 if any(r["errors"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
