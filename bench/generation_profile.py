"""`python -m bench.generation_profile`: where one decode step of the continuous batch spends its time, in process.

GPT-2 small's shape (random weights, as bench.generation builds it), in float32 or bfloat16,
linear layers packed for oneDNN as a worker packs them, one torch thread. Rows prefill, then decode for a while (each at
its own length, as in a busy batch); the median of timed steps is split into the model's forward
and what follows it (sampling and bookkeeping per row), and torch.profiler's table of one step
says what the forward spends on: the matmuls of the layers, the LM head, attention, cache writes.

`--tiny-vocab` is a tiny model (2 layers, 64 wide) with Qwen2's 151,936-token vocabulary: the forward is
small and what a step spends beside it (each row's drawing over the whole vocabulary, its text, its
events) is measured as host time per row per step (a step less its forward, over the rows).
`--details` has every row report its tokens' logprobs (TGI's details), as streams and OpenAI's answers do.
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
    parser.add_argument("--vocab", type=int, default=50257, help="the vocabulary (GPT-2's by default)")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--tiny-vocab", action="store_true",
                        help="--vocab 151936 --layers 2 --hidden 64 --heads 2: Qwen2's vocabulary, a tiny forward")
    parser.add_argument("--details", action="store_true", help="rows ask TGI's details (each token's logprob)")
    args = parser.parse_args(argv)
    if args.tiny_vocab:
        args.vocab, args.layers, args.hidden, args.heads = 151936, 2, 64, 2
    torch.set_num_threads(args.threads)
    from bench.generation import PROMPTS, build_model
    from models_registry.inference import cpu_packing
    from models_registry.inference.generation_batch import GenerationBatch
    from models_registry.inference.loading import DTYPES, load_pipeline

    with tempfile.TemporaryDirectory(prefix="decode-profile-") as tmp:
        model_dir = build_model(Path(tmp) / "gpt2", args.vocab, args.layers, args.hidden, args.heads)
        pipe = load_pipeline("text-generation", str(model_dir), None, "cpu", DTYPES[args.dtype])
    packed = cpu_packing.pack(pipe.model)
    batch = GenerationBatch(pipe, max_rows=args.rows)
    rows = [batch.prepare(f"r{n}", PROMPTS[n % len(PROMPTS)], {"max_new_tokens": 1000, "details": args.details}, None)
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
    steps, hosts = [], []
    for _ in range(args.steps):
        before = len(forward_s)
        started = time.perf_counter()
        batch.step()
        steps.append(time.perf_counter() - started)
        hosts.append(steps[-1] - sum(forward_s[before:]))  # beside this step's forwards
    del batch.model.forward
    step, forward = statistics.median(steps), statistics.median(forward_s)
    host = sorted(1e6 * h / args.rows for h in hosts)
    print(f"{args.rows} rows decoding (lengths {min(r.cached for r in rows)}-{max(r.cached for r in rows)}, mean "
          f"{sum(r.cached for r in rows) // len(rows)}), "
          f"{args.dtype}, {packed} layers packed, torch threads {args.threads}: step p50 {1000 * step:.1f} ms = forward "
          f"{1000 * forward:.1f} ms + sampling and bookkeeping {1000 * (step - forward):.1f} ms "
          f"({1000 * (step - forward) / args.rows:.2f} ms a row)")
    print(f"host time per row per step (vocab {args.vocab}, {args.rows} rows, details {args.details}): "
          f"p50 {statistics.median(host):.1f} us (min {host[0]:.1f}, max {host[-1]:.1f}, {args.steps} steps)")
    if args.top <= 0:
        return
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        batch.step()
    vocab = batch.model.config.vocab_size
    head = sum(e.self_cpu_time_total for e in prof.key_averages(group_by_input_shape=True)
               if e.key == "mkldnn::_linear_pointwise" and any(vocab in shape for shape in e.input_shapes if shape))
    print(f"LM head ({vocab} wide): {head / 1000:.1f} ms of the profiled step")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top))


if __name__ == "__main__":
    main()
