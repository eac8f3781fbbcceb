"""`python -m bench.gpu` (`make bench-gpu`): an encoder served at the speed the device computes it? (issue 26)

Builds a model of all-MiniLM-L6-v2's shape with random weights, measures in process the
ceilings (tokenize + forward + pool; the forward alone with inputs on the device, float32
and half; the fast tokenizer on one thread and in one batch call), then serves it with the
product in its default layout for the device (`manage.py serve`'s: capacity.sizing) and runs
closed-loop clients on single sentences and on lists of 32, every answer checked against
the in-process vector (cosine > 0.999), with the GPU's busy share (pynvml or nvidia-smi;
n/a on CPU) and the CPU per request of each role (web, worker, Redis, client; /proc).
Writes docs/bench/gpu-<device>.md and bench-results/gpu-<device>.json. Never part of
`make test`. `--device cpu --quick` is the trial run for a machine without a GPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import corpus, gpu_ceiling, loadgen
from bench.http_client import build_request
from bench.procstat import CpuMeter
from bench.stack_setup import stopped_on_failure

ROOT = Path(__file__).resolve().parent.parent
MODEL = "minilm-shaped"
LIST = 32


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; --quick: the short CPU trial's windows and levels."""
    parser = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="", help="cuda, cuda:N or cpu (default: cuda when available)")
    parser.add_argument("--levels", default="", help="single-sentence concurrencies (default 1,64,512,1024)")
    parser.add_argument("--list-levels", default="", help="concurrencies for lists of 32 (default 64,256)")
    parser.add_argument("--seconds", type=float, default=0.0, help="window per level (default 8; quick 3)")
    parser.add_argument("--warmup", type=float, default=0.0, help="warm-up per level (default 2; quick 1)")
    parser.add_argument("--corpus-size", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=0, help="worker processes (default: the device's layout)")
    parser.add_argument("--webs", type=int, default=0, help="web processes (default: one per core, at most 8)")
    parser.add_argument("--dtype", default="auto", help="the registered dtype (auto: half where the probe allows)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--out", default="", help="the report (default docs/bench/gpu-<device>.md)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if not args.device:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    args.levels = [int(v) for v in (args.levels or ("1,8,32" if args.quick else "1,64,512,1024")).split(",")]
    args.list_levels = [int(v) for v in (args.list_levels or ("4" if args.quick else "64,256")).split(",")]
    args.seconds = args.seconds or (3.0 if args.quick else 8.0)
    args.warmup = args.warmup or (1.0 if args.quick else 2.0)
    args.out = Path(args.out or ROOT / "docs" / "bench" / f"gpu-{args.device.replace(':', '')}.md")
    return args


def start_product(args: argparse.Namespace, model_dir: Path) -> tuple[Any, str, str, dict[str, int]]:
    """The product serving the model on args.device in its default layout: (stack, URL, token, layout)."""
    from models_registry.capacity import sizing
    from tests.stack import Stack

    cores = sizing.available_cores()
    layout = sizing.default_layout(cores, args.device, workers=args.workers,
                                   device_bytes=sizing.accelerator_memory_bytes(args.device))
    extra = {"HOSTING_DEVICE": args.device, "HOSTING_TORCH_THREADS": str(layout.threads),
             **dict(pair.split("=", 1) for pair in args.env)}
    stack = Stack.create(extra)
    with stopped_on_failure(stack):
        stack.manage("register_model", MODEL, "--source", str(model_dir), "--task", "feature-extraction",
                     "--pooling", "mean", "--normalize", "--dtype", args.dtype, "--max-batch-size", "256",
                     "--max-batch-delay-ms", "2", "--timeout", "60", "--max-queue-size", "65536")
        token = stack.create_token("all")
        for _ in range(layout.workers):
            stack.start_worker()
        webs = sizing.web_processes(cores, args.webs)
        url = stack.start_web(processes=webs)
        stack.wait_ready([MODEL], timeout_s=600)
    return stack, url, token, {"cores": cores, "workers": layout.workers, "threads": layout.threads, "webs": webs}


def _requests(url: str, token: str, sentences: list[str], size: int) -> list[bytes]:
    """One POST per sentence (size 1) or per list of size consecutive sentences."""
    n = len(sentences)
    bodies = [{"inputs": sentences[i]} if size == 1 else {"inputs": [sentences[(i + k) % n] for k in range(size)]}
              for i in range(n)]
    return [build_request("POST", url, f"/models/{MODEL}", json.dumps(b).encode(), token) for b in bodies]


def check(result: loadgen.LevelResult, answers: list[loadgen.Answer], reference: np.ndarray, size: int) -> None:
    """Every answer: status 200 and each vector's cosine to its sentence's in-process vector > 0.999."""
    n = len(reference)
    for index, status, _head, body in answers:
        result.statuses[str(status)] = result.statuses.get(str(status), 0) + 1
        if status != 200:
            result.errors += 1
            if len(result.sample_errors) < 3:
                result.sample_errors.append(f"{status}: {body[:200].decode(errors='replace')}")
            continue
        result.checked += 1
        try:
            got = np.asarray(json.loads(body), dtype=np.float32).reshape(size, -1)
            want = reference[[(index + k) % n for k in range(size)]]
            ok = got.shape == want.shape and float((got * want).sum(1).min()) > 0.999
        except (ValueError, TypeError):
            ok = False
        if not ok:
            result.wrong += 1
            if len(result.sample_errors) < 3:
                result.sample_errors.append(f"wrong answer for request {index}: {body[:120]!r}")


def run_level(url: str, requests: list[bytes], level: int, size: int, args: argparse.Namespace, meter: CpuMeter,
              sampler: gpu_ceiling.GpuSampler, reference: np.ndarray) -> dict[str, Any]:
    """One closed-loop level: rate, latency, GPU busy and CPU ms per request of each role."""
    busy: dict[str, str] = {}

    def on_window(mark: str) -> None:
        meter.mark(mark)
        if mark == "start":
            sampler.start()
        else:
            busy["gpu"] = sampler.stop()

    result, answers = asyncio.run(loadgen.run_level([url], {url: requests}, level, args.warmup, args.seconds,
                                                    10**9, on_window=on_window))
    check(result, answers, reference, size)
    cpu, done, window = meter.between("start", "end"), max(result.completed, 1), max(result.window_s, 1e-9)
    return {"what": "single sentences" if size == 1 else f"lists of {size}", "clients": level,
            "req_s": round(result.completed / window, 1), "sentences_s": round(result.completed * size / window, 1),
            "p50_ms": round(loadgen.percentile(result.latencies_ms, 50), 2),
            "p99_ms": round(loadgen.percentile(result.latencies_ms, 99), 2), "gpu_busy": busy.get("gpu", "n/a"),
            "errors": result.errors, "wrong": result.wrong, "checked": result.checked,
            "sample_errors": result.sample_errors,
            "cpu_ms_per_request": {k: round(1000 * v / done, 3) for k, v in cpu.items()},
            "cpu_cores": {k: round(v / window, 2) for k, v in cpu.items()}}


def main(argv: list[str] | None = None) -> int:
    """Ceilings in process, then the product at each level; the report."""
    args = parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sentences = corpus.build_corpus(args.corpus_size, 20240611)
    workdir = Path(tempfile.mkdtemp(prefix="bench-gpu-"))
    model_dir = gpu_ceiling.build_model(workdir / "model")
    reference, ceilings = gpu_ceiling.measure(model_dir, sentences, args.device, seconds=min(args.seconds, 4.0))
    gpu_ceiling.release(args.device)
    print("in process:", ceilings, flush=True)
    stack, url, token, layout = start_product(args, model_dir)
    rows: list[dict[str, Any]] = []
    try:
        groups = {"web": [p.pid for p, _ in stack.web], "worker": [p.pid for p in stack.workers],
                  "redis": [stack.redis.process.pid] if stack.redis else [], "client": [os.getpid()]}
        # The servers are this process's children: the client's own CPU leaves them out.
        meter, sampler = CpuMeter(groups, without_children=("client",)), gpu_ceiling.GpuSampler(args.device)
        for size, levels in ((1, args.levels), (LIST, args.list_levels)):
            requests = _requests(url, token, sentences, size)
            for level in levels:
                rows.append(run_level(url, requests, level, size, args, meter, sampler, reference))
                print(json.dumps(rows[-1]), flush=True)
        from tests.stack import http_json

        state = http_json("GET", f"{url}/models/{MODEL}", token=token)[2]
    finally:
        stack.stop()
    report = {"config": {"device": args.device, **layout, "seconds": args.seconds,
                         "warmup": args.warmup, "corpus": corpus.describe(sentences), "dtype": args.dtype,
                         "active_dtype": state.get("active_dtype"), "dtype_reason": state.get("dtype_reason"),
                         "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
              "ceilings": ceilings, "rows": rows}
    json_path = ROOT / "bench-results" / f"{args.out.stem}.json"
    json_path.parent.mkdir(exist_ok=True)
    json_path.write_text(json.dumps(report, indent=2))
    args.out.write_text(render(report))
    print(render(report))
    print(f"written: {args.out}, {json_path}")
    return 1 if any(r["errors"] or r["wrong"] for r in rows) else 0


def render(report: dict[str, Any]) -> str:
    """The markdown report."""
    config, ceilings = report["config"], report["ceilings"]
    c = config["corpus"]
    half = next((k for k in ceilings if k.startswith("forward_pool_") and not k.endswith("fp32")), "")
    lines = [f"# bench-gpu on {config['device']} ({config['when']})", "",
             f"`python -m bench.gpu --device {config['device']}`: a MiniLM-shaped encoder (random weights), "
             f"{c['size']:,} sentences of {c['min_words']}-{c['max_words']} words (median {c['median_words']}); {config['cores']} host cores, {config['webs']} web process(es), {config['workers']} "
             f"worker(s) x {config['threads']} torch thread(s); registered dtype {config['dtype']}, served as {config['active_dtype']} "
             f"({config['dtype_reason']}); {config['seconds']} s windows after {config['warmup']} s warm-up, one run, "
             "every answer checked against the in-process vector (cosine > 0.999).", "",
             "| in process | sentences/s |", "|---|---:|",
             f"| tokenize + forward + pool, length-sorted batches of 256, fp32 | {ceilings['tokenize_forward_pool_fp32']:,.0f} |",
             f"| forward + pool only, inputs on the device, batches of 1,024, fp32 | {ceilings['forward_pool_fp32']:,.0f} |",
             f"| forward + pool only, {half.rsplit('_', 1)[-1]} | {ceilings.get(half, 0):,.0f} |",
             f"| fast tokenizer, one thread / one batch call | {ceilings['tokenizer_one_thread']:,.0f} / "
             f"{ceilings['tokenizer_batch_call']:,.0f} |",
             f"| one sentence alone, p50 | {ceilings['single_sentence_p50_ms']} ms |", "",
             "| product | clients | req/s | sentences/s | p50 ms | p99 ms | GPU busy | CPU ms/request (web / worker / "
             "redis / client) | errors / wrong of checked |", "|---|---:|---:|---:|---:|---:|---|---|---|"]
    for r in report["rows"]:
        cpu = r["cpu_ms_per_request"]
        lines.append(f"| {r['what']} | {r['clients']} | {r['req_s']:,.0f} | {r['sentences_s']:,.0f} | {r['p50_ms']} | "
                     f"{r['p99_ms']} | {r['gpu_busy']} | {cpu.get('web', 0):.2f} / {cpu.get('worker', 0):.2f} / "
                     f"{cpu.get('redis', 0):.2f} / {cpu.get('client', 0):.2f} | {r['errors']} / {r['wrong']} of "
                     f"{r['checked']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
