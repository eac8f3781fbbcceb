"""`python -m bench.gpu_generation`: streamed generation on a GPU, ours against `transformers serve` (issue 34).

The same levels as `make bench-generation` (bench.generation: closed-loop streams of 16-256 new
tokens on /v1/completions, a 4-token probe beside them), on a model of Qwen2-0.5B's shape (24
layers, 896 wide, 14 heads / 2 KV heads, 151,936 tokens; random weights in bfloat16, built in a
temp dir; its end-of-text embedding zeroed so every answer runs its length), served by the product
on the device with continuous batching and by `transformers serve --continuous-batching` on the
same device. On an offline GPU machine transformers serve's extras come as wheels on PYTHONPATH
(bench/gpu_run.sh with HOSTING_BENCH_EXTRA_SITE); `--shape tiny` is the CPU trial. Writes
docs/bench/generation-<device>.md (or --out).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.generation import level, solo_probe, table
from bench.generation_peer import Server, start_serve
from bench.stack_setup import stopped_on_failure

ROOT = Path(__file__).resolve().parent.parent
SHAPES: dict[str, dict[str, int]] = {
    "qwen2-0.5b": {"hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
                   "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936},
    "tiny": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "intermediate_size": 128, "vocab_size": 1024},
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_generation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shape", default="qwen2-0.5b", choices=sorted(SHAPES))
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--levels", default="1,8,32,128")
    parser.add_argument("--seconds", type=float, default=15.0, help="window per level and server")
    parser.add_argument("--max-requests", type=int, default=2000)
    parser.add_argument("--min-tokens", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--max-batch-size", type=int, default=160, help="the product's rows (the largest level + probe)")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--only", default="", help="servers to run: continuous,transformers-serve")
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    args.out = Path(args.out or ROOT / "docs" / "bench" / f"generation-{args.device.replace(':', '')}.md")
    return args


def build_model(dest: Path, shape: str, dtype: str) -> Path:
    """A Qwen2-style decoder of the shape with random weights; a byte-level BPE padded with added tokens to its vocabulary."""
    import torch
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    from tests import model_factory

    dims = SHAPES[shape]
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=model_factory._byte_level_bpe([model_factory.EOS]),
                                        bos_token=model_factory.EOS, eos_token=model_factory.EOS,
                                        pad_token=model_factory.EOS, model_max_length=2048)
    tokenizer.add_tokens([f"<w{i}>" for i in range(dims["vocab_size"] - len(tokenizer))])
    eos = tokenizer.convert_tokens_to_ids(model_factory.EOS)
    config = Qwen2Config(**dims, max_position_embeddings=2048, bos_token_id=eos, eos_token_id=eos, pad_token_id=eos,
                         tie_word_embeddings=True, use_sliding_window=False)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight[eos] = 0  # tied head: its logit 0 is never the top one
    model = model.to(getattr(torch, dtype))
    model.generation_config.pad_token_id = eos
    model.generation_config.do_sample = False
    tokenizer.save_pretrained(str(dest))
    model.save_pretrained(str(dest))
    return dest


def start_product(model_dir: Path, args: argparse.Namespace) -> tuple[Any, Server]:
    """The product: one web process and one worker on the device, continuous batching."""
    from tests.stack import Stack

    stack = Stack.create({"HOSTING_TORCH_THREADS": str(args.threads), "HOSTING_WORKER_NICE": "0",
                          "HOSTING_DEVICE": args.device})
    with stopped_on_failure(stack):
        stack.manage("register_model", "gen", "--source", str(model_dir), "--task", "text-generation",
                     "--dtype", args.dtype, "--max-batch-size", str(args.max_batch_size), "--timeout", "600",
                     "--max-queue-size", "1024")
        token = stack.create_token("all")
        stack.start_worker({"HOSTING_WORKER_MODELS": "gen"})
        url = stack.start_web()
        stack.wait_ready(["gen"], timeout_s=600)
    return stack, Server("continuous", url, "gen", {"Authorization": f"Bearer {token}"})


def main(argv: list[str] | None = None) -> int:
    """Build the model, start both servers, run every level on each, print and write the table."""
    args = parse_args(argv)
    wanted = set(filter(None, args.only.split(","))) or {"continuous", "transformers-serve"}
    levels = [int(x) for x in args.levels.split(",")]
    results: dict[str, dict[int, dict[str, Any]]] = {}
    solo: dict[str, float] = {}
    skipped: dict[str, str] = {}
    log_dir = ROOT / "bench-results"
    log_dir.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-gpu-generation-") as tmp:
        model_dir = build_model(Path(tmp) / args.shape, args.shape, args.dtype)
        servers: dict[str, Server] = {}
        stack = serve = None
        try:
            if "continuous" in wanted:
                try:
                    stack, servers["continuous"] = start_product(model_dir, args)
                except Exception as error:  # noqa: BLE001 - the peer still runs; the reason goes in the report
                    skipped["continuous"] = f"the product did not start: {str(error)[:300]}"
            if "transformers-serve" in wanted:
                # Offline machine: its extras are already importable (PYTHONPATH), so run it with this python.
                python = Path(sys.executable) if os.environ.get("HOSTING_BENCH_EXTRA_SITE") else None
                serve, server, why = start_serve(model_dir, args.threads, log_dir, device=args.device,
                                                 python=python, extra=["--dtype", args.dtype],
                                                 blocks=4096 if args.device != "cpu" else 320)
                if server is None:
                    skipped["transformers-serve"] = why
                else:
                    servers["transformers-serve"] = server
            for name, server in servers.items():
                solo[name] = asyncio.run(solo_probe(server))
                results[name] = {}
                for streams in levels:
                    results[name][streams] = asyncio.run(level(server, streams, args))
                    print(name, streams, results[name][streams], flush=True)
        finally:
            if serve is not None:
                os.killpg(serve.pid, 15)
                serve.wait(30)
            if stack is not None:
                stack.stop()
    report = table(results, solo)
    notes = "".join(f"\n- {name} skipped: {why}" for name, why in skipped.items())
    text = (f"# Streamed generation on {args.device} (`python -m bench.gpu_generation`)\n\n"
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs; {args.shape} shape "
            f"(random weights, {args.dtype}), greedy, prompts of 2-9 tokens, {args.min_tokens}-{args.max_tokens} new "
            f"tokens each, window {args.seconds:g} s or {args.max_requests} requests per level; the product with one "
            f"web process and one worker (max_batch_size {args.max_batch_size}). tokens/s: content chunks received "
            f"in the window / window. Probe: a 4-token request 0.5 s apart beside the streams; in brackets alone."
            f"\n\n{report}\n{notes}\n")
    print(text)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
