"""`python -m bench.memory`: what the batch memory cap costs when memory is plentiful, as a printed table.

One stack, the demo model registered twice from the same files: `capped` is served by a
worker with HOSTING_MEMORY_CAP on (the default: warm-up at load, peaks measured, the
batcher asking the fit before each batch grows), `uncapped` by a worker with it off. Both
have the default budget (plenty). Rounds alternate between the two (one worker busy at a
time, one torch thread each), closed loop at C=32 over the mixed-length corpus; the
medians of req/s are compared. Bounded: rounds x 2 windows of --seconds.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from bench import corpus
from bench.policies import requests_for, run
from bench.procstat import CpuMeter
from bench.stack_setup import stopped_on_failure

CASES = {"capped": "1", "uncapped": "0"}  # model name -> HOSTING_MEMORY_CAP of the worker serving it


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0, help="measurement window of each run")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are printed")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--corpus-size", type=int, default=600)
    return parser.parse_args(argv)


def start_stack() -> tuple[Any, str, str]:
    """(stack, web URL, token): one worker per case, each serving its own registration of the demo model."""
    from tests.model_factory import minilm_path
    from tests.stack import Stack

    stack = Stack.create({"HOSTING_TORCH_THREADS": "1"})
    with stopped_on_failure(stack):
        for name in CASES:
            stack.manage("register_model", name, "--source", str(minilm_path()), "--task", "feature-extraction",
                         "--pooling", "mean", "--normalize", "--max-batch-size", "32", "--timeout", "60")
        token = stack.create_token("all")
        for name, cap in CASES.items():
            stack.start_worker(env={"HOSTING_WORKER_MODELS": name, "HOSTING_MEMORY_CAP": cap})
        url = stack.start_web()
        stack.wait_ready(list(CASES))
    return stack, url, token


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and print the table."""
    args = parse_args(argv)
    texts = corpus.build_corpus(args.corpus_size)
    stack, url, token = start_stack()
    pids = dict(zip(CASES, (worker.pid for worker in stack.workers)))
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in CASES}
    try:
        for round_no in range(args.rounds):
            order = list(CASES) if round_no % 2 == 0 else list(reversed(CASES))
            for name in order:
                meter = CpuMeter({"worker": [pids[name]]})
                rows[name].append(run(url, requests_for(url, f"/models/{name}", token, texts), args.concurrency, args,
                                      meter))
                print(f"round {round_no + 1} {name}: {rows[name][-1]['req_s']:.1f} req/s, "
                      f"{rows[name][-1]['worker_cpu_ms']:.2f} worker CPU ms per request", flush=True)
    finally:
        stack.stop()
    print(f"\nthe demo model, C={args.concurrency}, {args.rounds} rounds of {args.seconds:g} s, default budget (plenty)")
    print(f"{'worker':<34} {'req/s (median)':>14} {'worker CPU ms/req':>17} {'p50 ms':>7} {'p95 ms':>7} {'errors':>6}")
    medians, cpu = {}, {}
    for name, runs in rows.items():
        medians[name] = statistics.median(r["req_s"] for r in runs)
        cpu[name] = statistics.median(r["worker_cpu_ms"] for r in runs)
        label = f"{name} (HOSTING_MEMORY_CAP={CASES[name]})"
        print(f"{label:<34} {medians[name]:>14.1f} {cpu[name]:>17.2f} {statistics.median(r['p50_ms'] for r in runs):>7.1f} "
              f"{statistics.median(r['p95_ms'] for r in runs):>7.1f} {sum(r['errors'] for r in runs):>6}")
    print(f"cost of the cap: {1 - medians['capped'] / medians['uncapped']:+.1%} of throughput, "
          f"{cpu['capped'] / cpu['uncapped'] - 1:+.1%} worker CPU per request (target: under 3%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
