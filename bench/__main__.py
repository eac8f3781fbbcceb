"""`python -m bench`: the demo model's in-process ceiling, then the product under closed-loop HTTP load."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from bench import ceiling, comparison, corpus, loadgen, ort_ceiling, tiny
from bench.procstat import CpuMeter, wait_quiet
from bench.report import aggregate, evaluate_targets, render
from bench.stack_setup import stopped_on_failure
from models_registry.capacity import sizing

ROOT = Path(__file__).resolve().parent.parent
MODEL = "all-minilm-l6-v2"
ONNX_CACHE = ROOT / "test-artifacts" / "onnx-cache"  # the stack's HOSTING_ONNX_CACHE_DIR: one export for both
GROUPS = ("web", "worker", "redis", "client", "prober")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; --quick fills in short defaults for whatever was not given."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--levels", default="1,8,32,64", help="client concurrencies, comma-separated")
    parser.add_argument("--seconds", type=float, help="measurement window per level (default 8; quick 3)")
    parser.add_argument("--warmup", type=float, help="warm-up seconds before each window (default 1.5; quick 0.5)")
    parser.add_argument("--max-requests", type=int, default=20000, help="a window also ends after this many answers")
    parser.add_argument("--rounds", type=int, help="interleaved rounds; medians are reported (default 3; quick 1)")
    parser.add_argument("--server", choices=("uvicorn", "daphne"), default="uvicorn")
    parser.add_argument("--workers", type=int, default=0,
                        help="runworker processes (default: what `make run` starts on this machine)")
    parser.add_argument("--webs", type=int, default=1, help="web server processes (clients spread over them)")
    parser.add_argument("--torch-threads", type=int,
                        help="HOSTING_TORCH_THREADS for the worker(s) (default: what `make run` gives them)")
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--max-batch-delay-ms", type=int, default=5)
    parser.add_argument("--corpus-size", type=int, help="sentences (default 1000; quick 300)")
    parser.add_argument("--seed", type=int, default=20240611)
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the in-process ceiling")
    parser.add_argument("--probe-interval-ms", type=float, default=20.0)
    parser.add_argument("--out", default=str(ROOT / "bench-results"), help="folder for latest.json and latest.md")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                        help="before the ceiling and each round, wait up to this long for other processes to go quiet")
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--no-peers", action="store_true", help="skip Infinity (installed on first use otherwise)")
    parser.add_argument("--no-tiny", action="store_true", help="skip the tiny-model overhead run (bench.tiny)")
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = (("seconds", 8.0, 3.0), ("warmup", 1.5, 0.5), ("rounds", 3, 1), ("corpus_size", 1000, 300))
    for name, full, short in defaults:
        if getattr(args, name) is None:
            setattr(args, name, short if quick else full)
    args.levels = [int(v) for v in str(args.levels).split(",") if v.strip()]
    layout = sizing.default_layout(sizing.available_cores(), workers=args.workers)  # as `make run` would
    args.workers = layout.workers
    args.torch_threads = args.torch_threads or layout.threads
    return args


def model_path() -> str:
    """Directory of the bundled demo model."""
    from tests.model_factory import minilm_path

    return str(minilm_path())


def start_stack(args: argparse.Namespace, source: str) -> tuple[Any, list[str], str]:
    """The product on loopback with the demo model registered: (stack, web URLs, token)."""
    from tests.stack import Stack

    stack = Stack.create({"HOSTING_TORCH_THREADS": str(args.torch_threads)})
    with stopped_on_failure(stack):
        stack.manage("register_model", MODEL, "--source", source, "--task", "feature-extraction",
                     "--pooling", "mean", "--normalize", "--max-batch-size", str(args.max_batch_size),
                     "--max-batch-delay-ms", str(args.max_batch_delay_ms), "--timeout", "60")
        token = stack.create_token("all")
        for _ in range(args.workers):
            stack.start_worker()
        urls = [stack.start_web(args.server) for _ in range(args.webs)]
        stack.wait_ready([MODEL])
    return stack, urls, token


def start_prober(url: str, interval_s: float, seconds: float) -> tuple[Any, Any]:
    """A separate process sending GET /health every interval_s: (process, receiving pipe end)."""
    ctx = get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    process = ctx.Process(target=loadgen.probe_process, args=(url, "/health", interval_s, seconds, sender), daemon=True)
    process.start()
    sender.close()
    if not receiver.poll(60) or receiver.recv() != "ready":
        raise RuntimeError("the /health prober did not start")
    return process, receiver


def run_one_level(args: argparse.Namespace, urls: list[str], requests: dict[str, list[bytes]], level: int,
                  offset: int, meter: CpuMeter, probe: bool, reference: np.ndarray) -> dict[str, Any]:
    """One closed-loop level (with the /health prober when asked); its summary."""
    prober = receiver = None
    if probe:
        prober, receiver = start_prober(urls[0], args.probe_interval_ms / 1000, args.warmup + args.seconds + 1.0)
        meter.groups["prober"] = [prober.pid]
    result, answers = asyncio.run(loadgen.run_level(
        urls, requests, level, args.warmup, args.seconds, args.max_requests, offset=offset,
        on_window=lambda which: meter.mark(which)))
    health: dict[str, Any] | None = None
    if prober is not None and receiver is not None:
        samples = receiver.recv() if receiver.poll(30) else []
        prober.join(10)
        meter.groups["prober"] = []
        start, end = result.window
        inside = [(ms, status) for t0, ms, status in samples if start <= t0 <= end]
        latencies = [ms for ms, _ in inside]
        health = {"samples": len(inside), "errors": sum(1 for _, s in inside if s != 200),
                  "p50_ms": round(loadgen.percentile(latencies, 50), 2),
                  "p99_ms": round(loadgen.percentile(latencies, 99), 2),
                  "max_ms": round(max(latencies), 2) if latencies else None}
    loadgen.check_answers(result, answers, reference)
    cpu = meter.between("start", "end")
    window = max(result.window_s, 1e-9)
    lat = result.latencies_ms
    summary = {
        "concurrency": level, "window_s": round(result.window_s, 2), "answers": result.completed,
        "req_s": round(result.completed / window, 1),
        "p50_ms": round(loadgen.percentile(lat, 50), 2), "p95_ms": round(loadgen.percentile(lat, 95), 2),
        "p99_ms": round(loadgen.percentile(lat, 99), 2), "errors": result.errors, "wrong": result.wrong,
        "checked": result.checked, "statuses": result.statuses, "sample_errors": result.sample_errors,
        "server_headers_mean": result.server_headers,
        "cpu_cores": {k: round(v / window, 3) for k, v in cpu.items()},
        "cpu_ms_per_request": {k: round(1000 * v / max(result.completed, 1), 2) for k, v in cpu.items()},
        "health": health,
    }
    return summary


def main(argv: list[str] | None = None) -> int:
    """Ceiling, stack, levels, report; exit 1 on errors or wrong answers."""
    args = parse_args(argv)
    loadgen.use_uvloop()
    started = time.time()
    machine = {"cpus": os.cpu_count(), "loadavg_start": [round(v, 2) for v in os.getloadavg()],
               "python": platform.python_version()}
    sentences = corpus.build_corpus(args.corpus_size, args.seed)
    source = model_path()
    print(f"corpus: {corpus.describe(sentences)}", flush=True)
    if args.wait_quiet:
        print(f"other load before the ceiling: {wait_quiet(args.wait_quiet):.2f} cores", flush=True)
    print("measuring the in-process ceiling ...", flush=True)
    ceil = ceiling.measure_ceiling(source, sentences, threads=args.threads,
                                   repeats=1 if args.quick else 2, latency_calls=20 if args.quick else 50)
    reference = ceil.pop("reference")
    print(f"ceiling: {ceil}", flush=True)
    print("measuring the in-process ONNX Runtime ceiling ...", flush=True)
    ort = ort_ceiling.measure_ort_ceiling(source, ONNX_CACHE, sentences, threads=args.threads,
                                          latency_threads=args.torch_threads, repeats=1 if args.quick else 2,
                                          latency_calls=20 if args.quick else 50)
    ort["min_cosine_to_torch"] = round(float(np.min(np.sum(ort.pop("vectors") * reference, axis=1))), 6)
    print(f"ONNX Runtime ceiling: {ort}", flush=True)
    print(f"starting the stack ({args.server} x{args.webs}, {args.workers} worker(s)) ...", flush=True)
    stack, urls, token = start_stack(args, source)
    per_level: dict[int, list[dict[str, Any]]] = {level: [] for level in args.levels}
    probe_level = 64 if 64 in args.levels else max(args.levels)
    try:
        requests = {url: loadgen.inference_requests(url, MODEL, token, sentences) for url in urls}
        groups = {"web": [p.pid for p, _ in stack.web], "worker": [p.pid for p in stack.workers],
                  "redis": [stack.redis.process.pid] if stack.redis else [], "client": [os.getpid()], "prober": []}
        meter = CpuMeter(groups, without_children=("client",))  # the stack and prober are its children
        print("warming the server up ...", flush=True)
        asyncio.run(loadgen.run_level(urls, requests, max(args.levels), 0.0, 2.0 if args.quick else 4.0, 10**9))
        for round_no in range(args.rounds):
            order = args.levels if round_no % 2 == 0 else list(reversed(args.levels))
            if args.wait_quiet:
                print(f"other load before round {round_no + 1}: {wait_quiet(args.wait_quiet, groups=meter):.2f} cores")
            for level in order:
                summary = run_one_level(args, urls, requests, level, offset=round_no * 7919 + level * 31,
                                        meter=meter, probe=level == probe_level, reference=reference)
                summary["round"] = round_no + 1
                per_level[level].append(summary)
                health = f" health p99 {summary['health']['p99_ms']} ms" if summary["health"] else ""
                print(f"round {round_no + 1} c={level}: {summary['req_s']} req/s p50 {summary['p50_ms']} "
                      f"p99 {summary['p99_ms']} ms errors {summary['errors']} wrong {summary['wrong']} "
                      f"cpu cores {summary['cpu_cores']}{health}", flush=True)
                time.sleep(0.5)
    finally:
        stack.stop()
    measured = {"skipped": "--no-peers"} if args.no_peers else comparison.measure_peers(args, source, sentences, reference)
    rows = aggregate(per_level, ceil["sentences_per_s"])
    report = {
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "machine": machine, "corpus": corpus.describe(sentences), "ceiling": ceil, "levels": rows,
        "rounds": per_level, "duration_s": round(time.time() - started, 1),
    }
    report["targets"] = evaluate_targets(rows, ceil)
    report.update(ort_ceiling=ort, peers=measured, targets_issue13=comparison.targets(rows, measured, ort))
    markdown = render(report) + "\n" + comparison.render(rows, measured, ort, ceil["sentences_per_s"],
                                                         report["targets_issue13"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "latest.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "latest.md").write_text(markdown)
    print()
    print(markdown)
    print(f"written: {out / 'latest.json'}, {out / 'latest.md'} ({report['duration_s']:.0f} s)")
    bad = sum(r["errors"] + r["wrong"] for r in rows)
    if bad:
        print(f"FAILED: {bad} errors or wrong answers", file=sys.stderr)
        for r in per_level.values():
            for s in r:
                for line in s["sample_errors"][:3]:
                    print(f"  c={s['concurrency']} round {s['round']}: {line}", file=sys.stderr)
    if not args.no_tiny:  # the hop alone, beside its peers: `python -m bench.tiny`
        print("\nthe tiny-model overhead run (python -m bench.tiny) ...", flush=True)
        tiny_args = ["--out", args.out] + (["--quick"] if args.quick else []) + (["--no-peers"] if args.no_peers else [])
        bad += tiny.main(tiny_args)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
