"""`python -m bench.jobs`: a batch job's throughput against the best interactive throughput,
and the interactive p50 at 8 clients with and without a job running (same stack, same model).

Rounds interleave the measurements so machine noise hits them alike; medians are reported.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bench import corpus, loadgen
from bench.__main__ import MODEL, model_path, start_stack
from models_registry.capacity import sizing

ROOT = Path(__file__).resolve().parent.parent
TARGET = 0.9  # job lines/s >= this x the best interactive req/s


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(prog="python -m bench.jobs", description=__doc__)
    parser.add_argument("--levels", default="32,64", help="interactive concurrencies; the best one is the reference")
    parser.add_argument("--seconds", type=float, default=8.0, help="interactive measurement window")
    parser.add_argument("--warmup", type=float, default=1.5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--job-lines", type=int, default=3000, help="lines of the throughput job")
    parser.add_argument("--corpus-size", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=20240611)
    parser.add_argument("--workers", type=int, default=0, help="runworker processes (default: `make run`'s)")
    parser.add_argument("--webs", type=int, default=1)
    parser.add_argument("--server", default="uvicorn")
    parser.add_argument("--torch-threads", type=int)
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--max-batch-delay-ms", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "bench-results"))
    args = parser.parse_args(argv)
    args.levels = [int(v) for v in args.levels.split(",") if v.strip()]
    layout = sizing.default_layout(sizing.available_cores(), workers=args.workers)
    args.workers, args.torch_threads = layout.workers, args.torch_threads or layout.threads
    return args


class Jobs:
    """The Files and Batches API over HTTP."""

    def __init__(self, url: str, token: str) -> None:
        self.http = httpx.Client(base_url=url + "/v1", headers={"Authorization": f"Bearer {token}"}, timeout=120)

    def start(self, sentences: list[str], lines: int, tag: str) -> str:
        """Upload lines requests (cycling the corpus) and start a batch; its id."""
        rows = b"".join(json.dumps({"custom_id": f"{tag}-{i}", "method": "POST", "url": f"/models/{MODEL}",
                                    "body": {"inputs": sentences[i % len(sentences)]}}).encode() + b"\n"
                        for i in range(lines))
        uploaded = self.http.post("/files", files={"file": ("job.jsonl", io.BytesIO(rows))}, data={"purpose": "batch"})
        uploaded.raise_for_status()
        batch = self.http.post("/batches", json={"input_file_id": uploaded.json()["id"],
                                                 "endpoint": f"/models/{MODEL}", "completion_window": "24h"})
        batch.raise_for_status()
        return batch.json()["id"]

    def get(self, batch_id: str) -> dict[str, Any]:
        """The batch now."""
        return self.http.get(f"/batches/{batch_id}").json()

    def wait(self, batch_id: str, until: Any, timeout_s: float = 1800) -> list[tuple[float, dict[str, Any]]]:
        """Poll every 0.25 s until until(batch); the (time, batch) samples."""
        samples, deadline = [], time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            batch = self.get(batch_id)
            samples.append((time.monotonic(), batch))
            if until(batch):
                break
            time.sleep(0.25)
        return samples

    def cancel(self, batch_id: str) -> None:
        """Cancel and wait until it is."""
        self.http.post(f"/batches/{batch_id}/cancel")
        self.wait(batch_id, lambda b: b["status"] in ("cancelled", "completed", "failed"), 60)


def job_rate(samples: list[tuple[float, dict[str, Any]]]) -> tuple[float, int]:
    """Lines/s from the first committed chunk to the last (start-up and finalizing excluded); failed lines."""
    done = [(t, b["request_counts"]["completed"] + b["request_counts"]["failed"]) for t, b in samples]
    started = next((t, n) for t, n in done if n > 0)
    last = max(done, key=lambda s: (s[1], -s[0]))
    last = min((s for s in done if s[1] == last[1]), key=lambda s: s[0])
    return (last[1] - started[1]) / max(last[0] - started[0], 1e-9), samples[-1][1]["request_counts"]["failed"]


def level(urls: list[str], requests: dict[str, list[bytes]], concurrency: int, args: argparse.Namespace,
          offset: int) -> dict[str, Any]:
    """One closed-loop interactive window."""
    result, answers = asyncio.run(loadgen.run_level(urls, requests, concurrency, args.warmup, args.seconds, 10**9,
                                                    offset=offset))
    bad = sum(1 for _, status, _, _ in answers if status != 200) + result.errors
    return {"req_s": result.completed / max(result.window_s, 1e-9), "p50_ms": loadgen.percentile(result.latencies_ms, 50),
            "p99_ms": loadgen.percentile(result.latencies_ms, 99), "errors": bad}


def main(argv: list[str] | None = None) -> int:
    """Interleaved rounds: interactive levels, a job alone, C=8 alone, C=8 during a job."""
    args = parse_args(argv)
    loadgen.use_uvloop()
    sentences = corpus.build_corpus(args.corpus_size, args.seed)
    stack, urls, token = start_stack(args, model_path())
    rows: dict[str, list[dict[str, Any]]] = {}
    try:
        requests = {url: loadgen.inference_requests(url, MODEL, token, sentences) for url in urls}
        jobs = Jobs(urls[0], token)
        asyncio.run(loadgen.run_level(urls, requests, max(args.levels), 0.0, 3.0, 10**9))  # warm up
        for round_no in range(args.rounds):
            for c in args.levels:
                rows.setdefault(f"interactive c={c}", []).append(level(urls, requests, c, args, round_no * 7919 + c))
            batch_id = jobs.start(sentences, args.job_lines, f"r{round_no}")
            rate, failed = job_rate(jobs.wait(batch_id, lambda b: b["status"] in ("completed", "failed")))
            rows.setdefault("job alone", []).append({"lines_s": rate, "errors": failed})
            rows.setdefault("interactive c=8 alone", []).append(level(urls, requests, 8, args, round_no * 31))
            batch_id = jobs.start(sentences, 100_000, f"bg{round_no}")
            jobs.wait(batch_id, lambda b: b["request_counts"]["completed"] > 0, 120)
            before = jobs.get(batch_id)["request_counts"]["completed"]
            t0 = time.monotonic()
            during = level(urls, requests, 8, args, round_no * 53)
            during["lines_s"] = (jobs.get(batch_id)["request_counts"]["completed"] - before) / (time.monotonic() - t0)
            rows.setdefault("interactive c=8 during a job", []).append(during)
            jobs.cancel(batch_id)
            print(f"round {round_no + 1}: " + json.dumps({k: v[-1] for k, v in rows.items()}, default=str), flush=True)
    finally:
        stack.stop()
    med = {name: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for name, runs in rows.items()}
    best = max(med[f"interactive c={c}"]["req_s"] for c in args.levels)
    job = med["job alone"]["lines_s"]
    lines = [
        f"Batch jobs against interactive traffic: {MODEL}, {args.workers} worker(s) x {args.torch_threads} torch "
        f"thread(s), max batch {args.max_batch_size}; medians of {args.rounds} interleaved rounds "
        f"(interactive windows {args.seconds:.0f} s; job of {args.job_lines} lines).", "",
        "| measurement | req/s or lines/s | p50 ms | p99 ms | errors |", "|---|---:|---:|---:|---:|",
    ]
    for name, m in med.items():
        rate = m.get("lines_s") if name == "job alone" else m.get("req_s")
        lines.append(f"| {name} | {rate:.1f} | {m.get('p50_ms', float('nan')):.1f} | "
                     f"{m.get('p99_ms', float('nan')):.1f} | {sum(r['errors'] for r in rows[name])} |")
    during = med["interactive c=8 during a job"]
    lines += ["", f"Job throughput {job:.1f} lines/s = **{job / best:.2f} x** the best interactive {best:.1f} req/s "
                  f"(target {TARGET} x: {'PASS' if job >= TARGET * best else 'FAIL'}). Interactive p50 at c=8: "
                  f"{med['interactive c=8 alone']['p50_ms']:.1f} ms alone, {during['p50_ms']:.1f} ms during a job "
                  f"(which kept {during['lines_s']:.1f} lines/s meanwhile)."]
    markdown = "\n".join(lines) + "\n"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "jobs.md").write_text(markdown)
    (out / "jobs.json").write_text(json.dumps({"config": vars(args), "rounds": rows, "medians": med}, indent=2))
    print("\n" + markdown)
    return 0 if all(r["errors"] == 0 for runs in rows.values() for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
