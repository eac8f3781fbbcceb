"""`python -m bench.tei`: /rerank throughput (pairs/s), /tokenize latency, streamed generation speed.

Starts the product on loopback (`make run`'s worker layout), registers random-weight
cross-encoders (tiny, and shaped like ms-marco-MiniLM-L6) and the bundled MiniLM, and
prints one table per route (`bench-results/tei.md`). Rerank requests carry 100 texts each,
closed loop at each concurrency; every answer is checked (100 ranks, sorted).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import corpus, loadgen
from bench.http_client import build_request

ROOT = Path(__file__).resolve().parent.parent
TEXTS_PER_REQUEST = 100
QUERY = "how does the server batch requests from many clients?"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(prog="python -m bench.tei", description=__doc__)
    parser.add_argument("--levels", default="1,4", help="client concurrencies for /rerank")
    parser.add_argument("--seconds", type=float, default=8.0, help="measurement window per level")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--max-batch-size", type=int, default=32, help="of the text-ranking tasks")
    parser.add_argument("--models", default="tiny,minilm", help="cross-encoders: tiny, minilm (MiniLM-L6-sized)")
    parser.add_argument("--stream-levels", default="1,4", help="concurrent streamed generations")
    parser.add_argument("--stream-rounds", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=200, help="tokens per streamed generation")
    parser.add_argument("--out", default=str(ROOT / "bench-results"))
    return parser.parse_args(argv)


def rerank_requests(url: str, model: str, token: str, sentences: list[str], count: int) -> list[bytes]:
    """count /rerank bodies of TEXTS_PER_REQUEST texts each, cycling through the corpus."""
    bodies = []
    for k in range(count):
        texts = [sentences[(k * TEXTS_PER_REQUEST + i) % len(sentences)] for i in range(TEXTS_PER_REQUEST)]
        body = json.dumps({"model": model, "query": QUERY, "texts": texts}).encode()
        bodies.append(build_request("POST", url, "/rerank", body, token))
    return bodies


def wrong_rerank_answers(answers: list[loadgen.Answer]) -> int:
    """Answers that are not 100 distinct ranks sorted best first."""
    wrong = 0
    for _, status, _, body in answers:
        if status != 200:
            continue
        ranks = json.loads(body)
        scores = [r["score"] for r in ranks]
        if sorted(r["index"] for r in ranks) != list(range(TEXTS_PER_REQUEST)) or scores != sorted(scores, reverse=True):
            wrong += 1
    return wrong


def bench_rerank(url: str, token: str, model: str, levels: list[int], args: argparse.Namespace,
                 sentences: list[str]) -> list[dict[str, Any]]:
    """Closed-loop /rerank at each level: requests/s, pairs/s, latency."""
    rows = []
    requests = {url: rerank_requests(url, model, token, sentences, 50)}
    for level in levels:
        result, answers = asyncio.run(loadgen.run_level([url], requests, level, args.warmup, args.seconds, 10**9))
        errors = result.errors + sum(1 for _, status, _, _ in answers if status != 200)
        rate = result.completed / max(result.window_s, 1e-9)
        lat = result.latencies_ms
        rows.append({"model": model, "clients": level, "req_s": round(rate, 2),
                     "pairs_s": round(rate * TEXTS_PER_REQUEST, 1), "p50_ms": round(loadgen.percentile(lat, 50), 1),
                     "p99_ms": round(loadgen.percentile(lat, 99), 1), "errors": errors,
                     "wrong": wrong_rerank_answers(answers)})
        print(rows[-1], flush=True)
    return rows


def rerank_ceiling(path: Path, sentences: list[str], max_batch_size: int) -> float:
    """Pairs/s of the worker's own runner in process, batches of max_batch_size pairs (one thread per worker)."""
    import torch

    from models_registry.core.batch_types import BatchPolicy
    from models_registry.inference.model_runner import PipelineRunner
    from models_registry.catalog.specs import ModelSpec, TaskSpec

    torch.set_num_threads(1)
    task = TaskSpec(name="rank", task="text-ranking", parameters={}, pooling="mean", normalize=False,
                    policy=BatchPolicy(max_batch_size=max_batch_size), timeout_s=60)
    spec = ModelSpec(name="ce", source=str(path), revision="", device="cpu", dtype="float32", enabled=True,
                     tasks={"rank": task}, default_task="rank")
    runner = PipelineRunner(packing=False)
    loaded = runner.load(spec)
    pairs = [{"query": QUERY, "text": s} for s in sentences[:400]]
    runner.run(loaded, task, pairs[:max_batch_size], [{}] * max_batch_size)
    started = time.perf_counter()
    for start in range(0, len(pairs), max_batch_size):
        chunk = pairs[start:start + max_batch_size]
        runner.run(loaded, task, chunk, [{}] * len(chunk))
    return len(pairs) / (time.perf_counter() - started)


def bench_tokenize(url: str, token: str, model: str, sentences: list[str], seconds: float) -> dict[str, Any]:
    """Closed-loop /tokenize of one sentence, one client: latency through HTTP."""
    bodies = [build_request("POST", url, "/tokenize", json.dumps({"model": model, "inputs": s}).encode(), token)
              for s in sentences[:200]]
    result, answers = asyncio.run(loadgen.run_level([url], {url: bodies}, 1, 1.0, seconds, 10**9))
    lat = result.latencies_ms
    return {"model": model, "clients": 1, "req_s": round(result.completed / max(result.window_s, 1e-9), 1),
            "p50_ms": round(loadgen.percentile(lat, 50), 2), "p99_ms": round(loadgen.percentile(lat, 99), 2),
            "errors": result.errors + sum(1 for _, status, _, _ in answers if status != 200)}


async def _stream_once(client: Any, url: str, token: str, model: str, new_tokens: int) -> tuple[float, float, int]:
    """One streamed generation: (seconds to the first token, seconds from it to the last, tokens)."""
    started = time.perf_counter()
    first = last = 0.0
    count = 0
    body = {"inputs": QUERY, "stream": True, "parameters": {"max_new_tokens": new_tokens}}
    async with client.stream("POST", f"{url}/models/{model}", json=body,
                             headers={"Authorization": f"Bearer {token}"}) as response:
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                last = time.perf_counter()
                first = first or last
                count += 1
    return first - started, last - first, count


def bench_stream(url: str, token: str, model: str, levels: list[int], rounds: int, new_tokens: int
                 ) -> list[dict[str, Any]]:
    """Streamed generation at each concurrency: time to first token and tokens/s per stream and in all."""
    import httpx

    async def level(clients: int) -> list[tuple[float, float, int]]:
        async with httpx.AsyncClient(timeout=120) as client:
            await _stream_once(client, url, token, model, 4)  # warm
            results = []
            for _ in range(rounds):
                started = time.perf_counter()
                batch = await asyncio.gather(*(_stream_once(client, url, token, model, new_tokens)
                                               for _ in range(clients)))
                results.append((time.perf_counter() - started, batch))
            return results

    rows = []
    for clients in levels:
        runs = asyncio.run(level(clients))
        ttft = [b[0] * 1000 for _, batch in runs for b in batch]
        per_stream = [(b[2] - 1) / b[1] for _, batch in runs for b in batch if b[1] > 0]
        total = [sum(b[2] for b in batch) / wall for wall, batch in runs]
        rows.append({"clients": clients, "new_tokens": new_tokens,
                     "ttft_p50_ms": round(loadgen.percentile(ttft, 50), 1),
                     "ttft_max_ms": round(max(ttft), 1),
                     "tokens_s_per_stream": round(sorted(per_stream)[len(per_stream) // 2], 1),
                     "tokens_s_all_streams": round(sorted(total)[len(total) // 2], 1)})
        print(rows[-1], flush=True)
    return rows


def generate_ceiling(path: Path, new_tokens: int) -> float:
    """Tokens/s of the model's own generate() in process, one prompt, one thread (greedy)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path)).eval()
    inputs = tokenizer(QUERY, return_tensors="pt")
    with torch.inference_mode():
        model.generate(**inputs, max_new_tokens=4, do_sample=False)
        started = time.perf_counter()
        out = model.generate(**inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    return (out.shape[1] - inputs["input_ids"].shape[1]) / (time.perf_counter() - started)


def table(rows: list[dict[str, Any]]) -> str:
    """A markdown table of rows (same keys)."""
    if not rows:
        return ""
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---:|" * len(keys)]
    lines += ["| " + " | ".join(str(row[k]) for k in keys) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run every measurement and print/write the tables."""
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from models_registry.capacity import sizing
    from tests import model_factory
    from tests.stack import Stack

    levels = [int(v) for v in args.levels.split(",") if v.strip()]
    wanted = [m for m in args.models.split(",") if m]
    sentences = corpus.build_corpus(1000)
    layout = sizing.default_layout(sizing.available_cores())
    root = Path(tempfile.mkdtemp(prefix="bench-tei-"))
    paths = {name: model_factory.build_cross_encoder(root / name, minilm_sized=name == "minilm") for name in wanted}
    gpt2 = model_factory.build_tiny_gpt2(root / "gpt2", positions=1024)
    stack = Stack.create({"HOSTING_TORCH_THREADS": str(layout.threads)})
    report: dict[str, Any] = {"layout": {"workers": layout.workers, "threads": layout.threads}}
    try:
        for name, path in paths.items():
            stack.manage("register_model", f"ranker-{name}", "--source", str(path), "--task", "text-ranking",
                         "--max-batch-size", str(args.max_batch_size), "--timeout", "120")
        stack.manage("register_model", "minilm", "--source", str(model_factory.minilm_path()), "--task",
                     "feature-extraction", "--pooling", "mean", "--normalize")
        stack.manage("register_model", "tiny-gpt2", "--source", str(gpt2), "--task", "text-generation",
                     "--max-batch-size", "8", "--timeout", "120")
        token = stack.create_token("all")
        for _ in range(layout.workers):
            stack.start_worker()
        url = stack.start_web()
        stack.wait_ready([f"ranker-{name}" for name in paths] + ["minilm", "tiny-gpt2"])
        report["stream"] = bench_stream(url, token, "tiny-gpt2", [int(v) for v in args.stream_levels.split(",")],
                                        args.stream_rounds, args.new_tokens)
        report["rerank"] = [row for name in paths
                            for row in bench_rerank(url, token, f"ranker-{name}", levels, args, sentences)]
        report["tokenize"] = [bench_tokenize(url, token, "minilm", sentences, args.seconds)]
        print(report["tokenize"][0], flush=True)
    finally:
        stack.stop()
    report["rerank_ceiling"] = [{"model": f"ranker-{name}", "batch": args.max_batch_size,
                                 "pairs_s_one_thread": round(rerank_ceiling(path, sentences, args.max_batch_size), 1)}
                                for name, path in paths.items()]
    report["generate_ceiling"] = [{"model": "tiny-gpt2", "new_tokens": args.new_tokens,
                                   "tokens_s_one_thread": round(generate_ceiling(gpt2, args.new_tokens), 1)}]
    text = "\n\n".join([
        (f"Worker layout: {layout.workers} worker(s) x {layout.threads} torch thread(s); "
         f"{TEXTS_PER_REQUEST} texts per /rerank request, max_batch_size {args.max_batch_size}."),
        "### /rerank\n\n" + table(report["rerank"]),
        "### Cross-encoder in process (the worker's runner, one thread)\n\n" + table(report["rerank_ceiling"]),
        "### /tokenize (one sentence)\n\n" + table(report["tokenize"]),
        "### Streamed generation (tiny GPT-2, greedy; the prompt is one sentence)\n\n" + table(report["stream"]),
        "### generate() in process (one prompt, one thread)\n\n" + table(report["generate_ceiling"]),
    ])
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tei.md").write_text(text + "\n")
    (out / "tei.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
