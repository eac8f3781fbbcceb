"""`python -m bench.generation_lane`: the fast lane's modes side by side, in process (no web, no Redis).

GPT-2 small's shape (random weights, as bench.generation builds it), packed as a worker packs
it, one torch thread. Long rows (16-256 tokens each, a new one joining as one leaves) keep the
batch full while a 4-token request arrives 0.5 s after the previous one finished, as
bench.generation's probe does; its latency counts from its arrival (it joins at the next step).
Modes, in alternating rounds: no lane (the short request rides the batch), the lane after the
batch's forward on the compute thread, and the lane on a thread of its own (inference.fast_lane).
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

MODES = ("none", "after", "thread")


def run_mode(pipe: Any, mode: str, rows: int, seconds: float, seed: int) -> dict[str, float]:
    """One window of one mode: the long rows' tokens/s and the short request's latencies."""
    from bench.generation import PROMPTS
    from models_registry.inference import fast_lane
    from models_registry.inference.generation_batch import GenerationBatch

    pick = random.Random(seed)
    batch = GenerationBatch(pipe, max_rows=rows + 2, lane=fast_lane.shared_lane() if mode == "thread" else None)
    sequential = fast_lane.SEQUENTIAL_FORWARDS
    fast_lane.SEQUENTIAL_FORWARDS = 0 if mode == "none" else sequential
    made = 0

    def long_row() -> Any:
        nonlocal made
        made += 1
        return batch.prepare(f"long-{made}", PROMPTS[made % len(PROMPTS)],
                             {"max_new_tokens": pick.randint(16, 256)}, None)

    try:
        joining = [long_row() for _ in range(rows)]
        for _ in range(40):  # warm: lengths spread before the window
            joining = [long_row() for _ in batch.step(joining)]
        tokens, latencies = 0, []
        probe, arrives = None, time.perf_counter() + 0.5
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            now = time.perf_counter()
            if probe is None and now >= arrives:
                probe = batch.prepare("probe", "Paris is", {"max_new_tokens": 4}, None)
                joining.append(probe)
            before = {r.id: len(r.sequence.ids) for r in batch.rows}
            finished = batch.step(joining)
            joining = []
            for row in batch.rows + finished:
                if row.id.startswith("long-"):
                    tokens += len(row.sequence.ids) - before.get(row.id, 0)
            for row in finished:
                if row is probe:
                    latencies.append(time.perf_counter() - arrives)
                    probe, arrives = None, time.perf_counter() + 0.5
                else:
                    joining.append(long_row())
        elapsed = time.perf_counter() - started
    finally:
        fast_lane.SEQUENTIAL_FORWARDS = sequential
    return {"tokens_s": tokens / elapsed, "probe_ms": 1000 * statistics.median(latencies) if latencies else float("nan"),
            "probes": len(latencies)}


def solo(pipe: Any) -> float:
    """The 4-token request alone (ms, median of five)."""
    from models_registry.inference.generation_batch import GenerationBatch

    batch = GenerationBatch(pipe)
    times = []
    for _ in range(5):
        started = time.perf_counter()
        joining = [batch.prepare("probe", "Paris is", {"max_new_tokens": 4}, None)]
        while not batch.step(joining):
            joining = []
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    """Build and load the model, run the modes in alternating rounds, print the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.generation_lane", description=__doc__)
    parser.add_argument("--rows", default="8,32", help="long rows per level")
    parser.add_argument("--seconds", type=float, default=15.0, help="window per mode, level and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from bench.generation import build_model
    from models_registry.inference import cpu_packing
    from models_registry.inference.loading import load_pipeline

    with tempfile.TemporaryDirectory(prefix="decode-lane-") as tmp:
        pipe = load_pipeline("text-generation", str(build_model(Path(tmp) / "gpt2")), None, "cpu", torch.float32)
    cpu_packing.pack(pipe.model)
    alone = solo(pipe)
    modes = args.modes.split(",")
    results: dict[tuple[int, str], list[dict[str, float]]] = {}
    for round_ in range(args.rounds):
        for rows in (int(x) for x in args.rows.split(",")):
            for mode in modes if round_ % 2 == 0 else modes[::-1]:
                got = run_mode(pipe, mode, rows, args.seconds, seed=round_)
                results.setdefault((rows, mode), []).append(got)
                print(rows, mode, {k: round(v, 1) for k, v in got.items()}, flush=True)
    print(f"\n4-token request alone: {alone:.1f} ms; one torch thread; medians of {args.rounds} rounds of "
          f"{args.seconds:g} s\n")
    print("| long rows | lane | long rows' tokens/s | 4-token request p50 ms | x alone | requests |")
    print("|---:|---|---:|---:|---:|---:|")
    for (rows, mode), got in results.items():
        tokens = statistics.median(g["tokens_s"] for g in got)
        probe = statistics.median(g["probe_ms"] for g in got)
        print(f"| {rows} | {mode} | {tokens:.1f} | {probe:.1f} | {probe / alone:.2f} | "
              f"{sum(int(g['probes']) for g in got)} |")


if __name__ == "__main__":
    main()
