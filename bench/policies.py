"""`python -m bench.policies`: what the per-token policies cost and buy, as printed tables.

One stack (the demo model, a cached task, two web processes: HOSTING_RATE_LIMITS off on
the first, on on the second), then three measurements, in interleaved rounds:

- limits: web CPU per request at C=32 with accounting off, on without limits, on with limits;
- cache: latency (C=1) and throughput (C=32) of cache hits against misses of the same task;
- priority: interactive p50 at C=8 alone, beside a saturating client (C=128) of batch
  priority, and beside the same client at interactive priority (what it would be without classes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any

from bench import corpus, loadgen
from bench.http_client import build_request
from bench.procstat import CpuMeter
from bench.stack_setup import stopped_on_failure
from models_registry.capacity import sizing

MODEL = "all-minilm-l6-v2"
CACHED = "cached"
LIMITS = ("--requests-per-minute", "100000000", "--tokens-per-minute", "1000000000", "--tokens-per-day", "1000000000")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(prog="python -m bench.policies", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="limits,cache,priority", help="which measurements, comma-separated")
    parser.add_argument("--seconds", type=float, default=6.0, help="measurement window of each run")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds; medians are printed")
    parser.add_argument("--corpus-size", type=int, default=600)
    parser.add_argument("--workers", type=int, default=0, help="runworker processes (default: as `make run`)")
    parser.add_argument("--flood", type=int, default=128,
                        help="concurrency of the saturating client (several batches' worth: its backlog is the point)")
    args = parser.parse_args(argv)
    args.only = [part.strip() for part in args.only.split(",") if part.strip()]
    return args


def start_stack(args: argparse.Namespace) -> tuple[Any, dict[str, str], dict[str, str]]:
    """(stack, web URLs by name, tokens by name): web `off` runs without rate limits, `on` with."""
    from tests.model_factory import minilm_path
    from tests.stack import Stack

    layout = sizing.default_layout(sizing.available_cores(), workers=args.workers)
    stack = Stack.create({"HOSTING_TORCH_THREADS": str(layout.threads)})
    with stopped_on_failure(stack):
        for task_name, extra in ((MODEL, ()), (CACHED, ("--cache-ttl", "3600"))):
            stack.manage("register_model", MODEL, "--source", str(minilm_path()), "--task", "feature-extraction",
                         "--task-name", "feature-extraction" if task_name == MODEL else task_name, "--pooling",
                         "mean", "--normalize", "--max-batch-size", "32", "--timeout", "60", *extra)
        tokens = {name: stack.manage("create_api_token", name, *options).strip().splitlines()[-1]
                  for name, options in (("plain", ()), ("limited", LIMITS), ("bulk", ("--priority", "batch")))}
        stack.tokens["all"] = tokens["plain"]  # what wait_ready asks with
        for _ in range(layout.workers):
            stack.start_worker()
        env = dict(stack.env)
        stack.env["HOSTING_RATE_LIMITS"] = "0"
        urls = {"off": stack.start_web()}
        stack.env = env
        urls["on"] = stack.start_web()
        stack.wait_ready([MODEL])
    return stack, urls, tokens


def requests_for(url: str, path: str, token: str, texts: list[str]) -> list[bytes]:
    """One pre-built POST per text."""
    return [build_request("POST", url, path, json.dumps({"inputs": t}).encode(), token) for t in texts]


def run(url: str, raws: list[bytes], concurrency: int, args: argparse.Namespace,
        meter: CpuMeter | None = None) -> dict[str, Any]:
    """One closed-loop window: req/s, p50/p95 ms, errors, and CPU ms per request of each group."""
    marks = (lambda which: meter.mark(which)) if meter else None
    result, answers = asyncio.run(loadgen.run_level([url], {url: raws}, concurrency, args.warmup, args.seconds,
                                                    10**9, on_window=marks))
    return summarize(result, answers, meter)


def summarize(result: loadgen.LevelResult, answers: list[Any], meter: CpuMeter | None) -> dict[str, Any]:
    """The numbers of one window."""
    errors = sum(1 for _, status, _, _ in answers if status != 200) + result.errors
    row = {"req_s": result.completed / max(result.window_s, 1e-9),
           "p50_ms": loadgen.percentile(result.latencies_ms, 50),
           "p95_ms": loadgen.percentile(result.latencies_ms, 95), "errors": errors}
    if meter is not None:
        cpu = meter.between("start", "end")
        row.update({f"{group}_cpu_ms": 1000 * seconds / max(result.completed, 1) for group, seconds in cpu.items()})
    return row


def measure_limits(args: argparse.Namespace, urls: dict[str, str], tokens: dict[str, str], pids: dict[str, int],
                   texts: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Web CPU per request at C=32: accounting off, on without limits, on with limits."""
    cases = {"off (HOSTING_RATE_LIMITS=0)": ("off", "plain"), "on, token without limits": ("on", "plain"),
             "on, token with limits": ("on", "limited")}
    rows: dict[str, list[dict[str, Any]]] = {case: [] for case in cases}
    for round_no in range(args.rounds):
        for case, (web, token) in (cases.items() if round_no % 2 == 0 else reversed(cases.items())):
            meter = CpuMeter({"web": [pids[web]]})
            raws = requests_for(urls[web], f"/models/{MODEL}", tokens[token], texts)
            rows[case].append(run(urls[web], raws, 32, args, meter))
    return rows


def measure_cache(args: argparse.Namespace, urls: dict[str, str], tokens: dict[str, str], pids: dict[str, int],
                  texts: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Hits against misses of the cached task: C=1 latency and C=32 throughput."""
    url, path, token = urls["on"], f"/models/{MODEL}/{CACHED}", tokens["plain"]
    hits = requests_for(url, path, token, texts[:200])
    asyncio.run(loadgen.run_level([url], {url: hits}, 8, 0.0, 3.0, 10**9))  # every hit text cached now
    rows: dict[str, list[dict[str, Any]]] = {}
    for round_no in range(args.rounds):
        for concurrency in (1, 32):
            fresh = [f"r{round_no} c{concurrency} {n} {t}" for n, t in enumerate(texts)] * 1  # never seen before
            for label, raws in ((f"miss, C={concurrency}", requests_for(url, path, token, fresh)),
                                (f"hit, C={concurrency}", hits)):
                meter = CpuMeter({"web": [pids["on"]]})
                rows.setdefault(label, []).append(run(url, raws, concurrency, args, meter))
    return rows


def measure_priority(args: argparse.Namespace, urls: dict[str, str], tokens: dict[str, str],
                     texts: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Interactive p50 at C=8 alone, beside a saturating batch-priority client, beside the same at interactive."""
    url, path = urls["on"], f"/models/{MODEL}"
    interactive = requests_for(url, path, tokens["plain"], texts)
    rows: dict[str, list[dict[str, Any]]] = {}
    cases = {"interactive C=8 alone": None, f"beside batch-priority C={args.flood}": "bulk",
             f"beside interactive-priority C={args.flood} (no classes)": "plain"}
    for round_no in range(args.rounds):
        for case, other in cases.items():
            rows.setdefault(case, []).append(_interactive_beside(url, interactive, path, tokens, other, texts, args))
    return rows


def _interactive_beside(url: str, interactive: list[bytes], path: str, tokens: dict[str, str], other: str | None,
                        texts: list[str], args: argparse.Namespace) -> dict[str, Any]:
    async def both() -> dict[str, Any]:
        runs = [loadgen.run_level([url], {url: interactive}, 8, args.warmup + 1.0, args.seconds, 10**9)]
        if other is not None:
            flood = requests_for(url, path, tokens[other], list(reversed(texts)))
            runs.append(loadgen.run_level([url], {url: flood}, args.flood, 0.0, args.warmup + 1.0 + args.seconds,
                                          10**9))
        results = await asyncio.gather(*runs)
        row = summarize(*results[0], None)
        if other is not None:
            row["background_req_s"] = summarize(*results[1], None)["req_s"]
        return row

    return asyncio.run(both())


def table(title: str, rows: dict[str, list[dict[str, Any]]], columns: list[str]) -> str:
    """A markdown table of the medians over rounds."""
    lines = [f"### {title}", "", "| case | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for case, runs in rows.items():
        cells = []
        for column in columns:
            values = [r[column] for r in runs if r.get(column) is not None]
            cells.append(f"{statistics.median(values):.2f}" if values else "-")
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Start the stack, measure, print the tables; exit 1 on errors."""
    args = parse_args(argv)
    loadgen.use_uvloop()
    started = time.time()
    texts = corpus.build_corpus(args.corpus_size, 20240611)
    stack, urls, tokens = start_stack(args)
    pids = {"off": stack.web[0][0].pid, "on": stack.web[1][0].pid}
    out: list[str] = []
    errors = 0
    try:
        for url in urls.values():  # load, compile and warm every path once
            asyncio.run(loadgen.run_level([url], {url: requests_for(url, f"/models/{MODEL}", tokens["plain"],
                                                                   texts)}, 32, 0.0, 2.0, 10**9))
        if "limits" in args.only:
            rows = measure_limits(args, urls, tokens, pids, texts)
            out.append(table("Web CPU per request, rate limits off and on (C=32)", rows,
                             ["req_s", "p50_ms", "web_cpu_ms", "errors"]))
            errors += sum(r["errors"] for runs in rows.values() for r in runs)
        if "cache" in args.only:
            rows = measure_cache(args, urls, tokens, pids, texts)
            out.append(table("Response cache: hits against misses", rows,
                             ["req_s", "p50_ms", "p95_ms", "web_cpu_ms", "errors"]))
            errors += sum(r["errors"] for runs in rows.values() for r in runs)
        if "priority" in args.only:
            rows = measure_priority(args, urls, tokens, texts)
            out.append(table("Interactive traffic beside a saturating client", rows,
                             ["p50_ms", "p95_ms", "req_s", "background_req_s", "errors"]))
            errors += sum(r["errors"] for runs in rows.values() for r in runs)
    finally:
        stack.stop()
    print()
    print("\n\n".join(out))
    print(f"\n({args.rounds} rounds of {args.seconds:g} s, medians; {time.time() - started:.0f} s in all)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
