"""`python -m bench.adapter_generation`: decode tokens/s of 32 rows with every row on its own LoRA adapter vs all on
the base, in process.

GPT-2 small's shape (random weights, as bench.generation builds it) loaded as a worker loads it (its linear layers
packed for oneDNN), one torch thread, and N random peft adapters (r 8 on c_attn, c_proj and c_fc: every linear layer
of attention and MLP; made here with peft, a test dependency). The continuous batch (inference.generation_batch)
fills its rows, then times decode steps: all rows on the base, all on one adapter, and the rows spread over the N
adapters (row k on adapter k mod N). Rounds interleave the three; the table gives the median of the rounds and the
ratio to the base measured in the same round. Then each adapter's bytes against the whole model's.
`--http` measures the same through the product instead: a real stack (Redis, one worker, the web), closed-loop
/v1/completions streams on the base or spread over the adapters (bench.generation's streams), interleaved rounds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def build_adapters(base: Path, dest: Path, count: int, rank: int) -> list[Path]:
    """count random LoRA adapters of the GPT-2 in base, saved by peft."""
    from tests import adapter_layouts

    return [adapter_layouts.build_adapter(base, dest / f"a{i}", seed=i + 1, r=rank, task_type="CAUSAL_LM",
                                          targets=adapter_layouts.GPT2_TARGETS) for i in range(count)]


def decode_rate(pipe: Any, cache: Any, adapters: list[Any], rows: int, steps: int) -> float:
    """Tokens/s of rows decoding together (row k on adapters[k % len] when adapters is not empty)."""
    from bench.generation import PROMPTS
    from models_registry.inference.generation_batch import GenerationBatch

    batch = GenerationBatch(pipe, max_rows=rows, adapters=cache)
    joining = [batch.prepare(f"r{k}", PROMPTS[k % len(PROMPTS)], {"max_new_tokens": steps + 64}, None,
                             adapter=adapters[k % len(adapters)] if adapters else None) for k in range(rows)]
    batch.step(joining)
    while any(not r.decoding for r in batch.rows):
        batch.step()
    for _ in range(3):  # warm
        batch.step()
    started = time.perf_counter()
    for _ in range(steps):
        batch.step()
    rate = rows * steps / (time.perf_counter() - started)
    batch.step([], list(batch.rows))  # every row leaves
    return rate


async def streams_rate(url: str, token: str, models: list[str], streams: int, args: argparse.Namespace) -> float:
    """Tokens/s of closed-loop /v1/completions streams through HTTP, stream k on models[k % len(models)]."""
    import asyncio

    from bench.generation import level
    from bench.generation_peer import Server

    per_model = [sum(1 for k in range(streams) if k % len(models) == m) for m in range(len(models))]
    headers = {"Authorization": f"Bearer {token}"}
    rows = await asyncio.gather(*(level(Server(name, url, name, headers), count, args, probe_every_s=None)
                                  for name, count in zip(models, per_model) if count))
    errors = [e for row in rows for e in row["errors"]]
    if errors:
        raise RuntimeError(f"streams failed: {errors[:2]}")
    return sum(row["tokens_s"] for row in rows)


def through_http(base: Path, dirs: list[Path], args: argparse.Namespace) -> None:
    """The same comparison through the product: one continuous-batching worker, streams on the base or spread over
    the adapters (`--http`)."""
    import asyncio

    from bench.stack_setup import stopped_on_failure
    from tests.stack import Stack

    stack = Stack.create({"HOSTING_TORCH_THREADS": "1", "HOSTING_WORKER_NICE": "0"})
    try:
        with stopped_on_failure(stack):
            stack.manage("register_model", "gen", "--source", str(base), "--task", "text-generation",
                         "--max-batch-size", "40", "--timeout", "600", "--max-queue-size", "256", "--dtype", args.dtype)
            names = [f"a{i}" for i in range(len(dirs))]
            for name, path in zip(names, dirs):
                stack.manage("register_adapter", name, "--base", "gen", "--source", str(path))
            token = stack.create_token("all")
            stack.start_worker()
            url = stack.start_web()
            stack.wait_ready(["gen", *names])
        mixes = {"all on the base": ["gen"], f"{len(names)} adapters mixed": names}
        rates: dict[str, list[float]] = {name: [] for name in mixes}
        ratios: dict[str, list[float]] = {name: [] for name in mixes}
        for _ in range(args.rounds):
            measured = {name: asyncio.run(streams_rate(url, token, models, args.rows, args)) for name, models in
                        mixes.items()}
            for name, rate in measured.items():
                rates[name].append(rate)
                ratios[name].append(rate / measured["all on the base"])
    finally:
        stack.stop()
    print(f"Through HTTP: {args.rows} /v1/completions streams (closed loop, {args.seconds:.0f} s windows, "
          f"{args.min_tokens}-{args.max_tokens} tokens each), one worker, {args.dtype}, {args.rounds} rounds")
    print()
    print("| streams on | tokens/s (median) | range | x base (same round, median) |")
    print("|---|---:|---:|---:|")
    for name in mixes:
        print(f"| {name} | {statistics.median(rates[name]):.1f} | {min(rates[name]):.1f}-{max(rates[name]):.1f} | "
              f"{statistics.median(ratios[name]):.2f} |")


def main(argv: list[str] | None = None) -> None:
    """Build the model and adapters, time the three mixes in interleaved rounds, print the tables."""
    import torch

    from bench.generation import build_model
    from models_registry.catalog.specs import AdapterSpec
    from models_registry.inference import cpu_packing
    from models_registry.inference.adapter_cache import AdapterBudget, cache_for
    from models_registry.inference.loading import DTYPES, load_pipeline

    parser = argparse.ArgumentParser(prog="python -m bench.adapter_generation", description=__doc__)
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--steps", type=int, default=30, help="timed decode steps per mix and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--adapters", type=int, default=8)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--http", action="store_true", help="through the product: streams against a real stack")
    parser.add_argument("--seconds", type=float, default=30.0, help="--http: window per mix and round")
    parser.add_argument("--max-requests", type=int, default=200, help="--http: requests per mix, model and round")
    parser.add_argument("--min-tokens", type=int, default=64, help="--http: tokens asked per request, at least")
    parser.add_argument("--max-tokens", type=int, default=256, help="--http: at most")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="adapter-generation-bench-"))
    base = build_model(work / "gpt2")
    dirs = build_adapters(base, work, args.adapters, args.rank)
    if args.http:
        through_http(base, dirs, args)
        return
    pipe = load_pipeline("text-generation", str(base), None, "cpu", DTYPES[args.dtype])
    whole = sum(p.numel() * p.element_size() for p in pipe.model.parameters())
    packed = cpu_packing.pack(pipe.model)
    cache = cache_for(pipe.model, AdapterBudget(max_count=args.adapters, max_bytes=2**34))
    specs = [AdapterSpec(f"a{i}", str(d)) for i, d in enumerate(dirs)]
    mixes = {"all on the base": [], "all on one adapter": specs[:1], f"{args.adapters} adapters mixed": specs}
    rates: dict[str, list[float]] = {name: [] for name in mixes}
    ratios: dict[str, list[float]] = {name: [] for name in mixes}
    with torch.inference_mode():
        for _ in range(args.rounds):
            measured = {name: decode_rate(pipe, cache, adapters, args.rows, args.steps)
                        for name, adapters in mixes.items()}
            for name, rate in measured.items():
                rates[name].append(rate)
                ratios[name].append(rate / measured["all on the base"])
    print(f"GPT-2 small shape, {args.dtype}, {packed} layers packed, 1 torch thread, {args.rows} rows decoding, "
          f"{args.steps} steps x {args.rounds} rounds, adapters r {args.rank} on c_attn, c_proj, c_fc")
    print()
    print("| rows on | tokens/s (median) | range | x base (same round, median) |")
    print("|---|---:|---:|---:|")
    for name in mixes:
        print(f"| {name} | {statistics.median(rates[name]):.1f} | {min(rates[name]):.1f}-{max(rates[name]):.1f} | "
              f"{statistics.median(ratios[name]):.2f} |")
    each = [w.nbytes for w in cache.held.values()]
    print()
    print(f"Memory: one adapter {statistics.median(each) / 2**20:.2f} MiB against the whole model's "
          f"{whole / 2**20:.1f} MiB ({100 * statistics.median(each) / whole:.2f}%)")


if __name__ == "__main__":
    main()
