"""`python -m bench.generation_profile`: where one decode step of the continuous batch spends its time, in process.

GPT-2 small's shape (random weights, as bench.generation builds it), in float32 or bfloat16,
linear layers packed for oneDNN as a worker packs them, one torch thread. Rows prefill, then decode for a while (each at
its own length, as in a busy batch); the median of timed steps is split into the model's forward
and what follows it (sampling and bookkeeping per row), and torch.profiler's table of one step
says what the forward spends on: the matmuls of the layers, the LM head, attention, cache writes.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch


def main(argv: list[str] | None = None) -> None:
    """Build, load, fill a batch of rows, time and profile its decode steps; print the tables."""
    parser = argparse.ArgumentParser(prog="python -m bench.generation_profile", description=__doc__)
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20, help="timed decode steps")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--top", type=int, default=14, help="profiler rows shown")
    parser.add_argument("--spread", type=int, default=256, help="the rows' lengths spread over about this many")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="the model's weights")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from bench.generation import PROMPTS, build_model
    from models_registry.inference import cpu_packing
    from models_registry.inference.generation_batch import GenerationBatch
    from models_registry.inference.loading import DTYPES, load_pipeline

    with tempfile.TemporaryDirectory(prefix="decode-profile-") as tmp:
        pipe = load_pipeline("text-generation", str(build_model(Path(tmp) / "gpt2")), None, "cpu", DTYPES[args.dtype])
    packed = cpu_packing.pack(pipe.model)
    batch = GenerationBatch(pipe, max_rows=args.rows)
    rows = [batch.prepare(f"r{n}", PROMPTS[n % len(PROMPTS)], {"max_new_tokens": 1000}, None)
            for n in range(args.rows)]
    for row in rows:  # one joins every few steps: lengths spread as in a busy batch (bench.generation's 16-256)
        batch.step([row])
        for _ in range(args.spread // args.rows - 1):
            batch.step()
    forward_s: list[float] = []
    real = batch.model.forward

    def timed(*a: object, **k: object) -> object:
        started = time.perf_counter()
        out = real(*a, **k)
        forward_s.append(time.perf_counter() - started)
        return out

    batch.model.forward = timed  # type: ignore[method-assign]
    steps = []
    for _ in range(args.steps):
        started = time.perf_counter()
        batch.step()
        steps.append(time.perf_counter() - started)
    del batch.model.forward
    step, forward = statistics.median(steps), statistics.median(forward_s)
    print(f"{args.rows} rows decoding (lengths {min(r.cached for r in rows)}-{max(r.cached for r in rows)}, mean "
          f"{sum(r.cached for r in rows) // len(rows)}), "
          f"{args.dtype}, {packed} layers packed, torch threads {args.threads}: step p50 {1000 * step:.1f} ms = forward "
          f"{1000 * forward:.1f} ms + sampling and bookkeeping {1000 * (step - forward):.1f} ms "
          f"({1000 * (step - forward) / args.rows:.2f} ms a row)")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        batch.step()
    vocab = batch.model.config.vocab_size
    head = sum(e.self_cpu_time_total for e in prof.key_averages(group_by_input_shape=True)
               if e.key == "mkldnn::_linear_pointwise" and any(vocab in shape for shape in e.input_shapes if shape))
    print(f"LM head ({vocab} wide): {head / 1000:.1f} ms of the profiled step")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top))


if __name__ == "__main__":
    main()
