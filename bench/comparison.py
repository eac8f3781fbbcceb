"""The product beside its peers and both in-process ceilings: the peer runs, the ratios and the issue's targets."""

from __future__ import annotations

import asyncio
import socket
import statistics
import time
from typing import Any

import numpy as np

from bench import loadgen, peers

PEER_FACTOR = 1.5  # x the best peer at every level measured on both
ORT_FACTORS = {64: 0.8, 32: 0.7}  # x the in-process ONNX Runtime fp32 ceiling
P50_SLACK_MS = 3.0  # c=1 p50 <= in-process one-sentence latency of the same backend + this
HEALTH_P99_MS = 50.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _level(url: str, requests: list[bytes], level: int, args: Any, offset: int, reference: np.ndarray) -> dict[str, Any]:
    result, answers = asyncio.run(loadgen.run_level([url], {url: requests}, level, args.warmup, args.seconds,
                                                    args.max_requests, offset=offset))
    loadgen.check_answers(result, answers, reference, extract=peers.vector_of)
    window = max(result.window_s, 1e-9)
    return {"req_s": round(result.completed / window, 1), "p50_ms": round(loadgen.percentile(result.latencies_ms, 50), 2),
            "p99_ms": round(loadgen.percentile(result.latencies_ms, 99), 2), "errors": result.errors,
            "wrong": result.wrong, "checked": result.checked, "sample_errors": result.sample_errors[:3]}


def measure_peers(args: Any, source: str, sentences: list[str], reference: np.ndarray) -> dict[str, Any]:
    """{engine: {level: medians over rounds}} for each Infinity engine, or {"skipped": why}."""
    bin_dir, why_not = peers.prepare(source)
    if bin_dir is None:
        print(f"peers skipped: {why_not}", flush=True)
        return {"skipped": why_not}
    levels = [level for level in args.levels if level > 1]
    measured: dict[str, Any] = {}
    for engine in peers.ENGINES:
        try:
            with peers.running(bin_dir, engine, _free_port()) as (url, _pid):
                requests = peers.requests_for(url, sentences)
                asyncio.run(loadgen.run_level([url], {url: requests}, max(levels), 0.0, 2.0 if args.quick else 4.0, 10**9))
                rounds: dict[int, list[dict[str, Any]]] = {level: [] for level in levels}
                for round_no in range(args.rounds):
                    for level in (levels if round_no % 2 == 0 else list(reversed(levels))):
                        row = _level(url, requests, level, args, round_no * 7919 + level * 31, reference)
                        rounds[level].append(row)
                        print(f"infinity {engine} round {round_no + 1} c={level}: {row['req_s']} req/s "
                              f"p50 {row['p50_ms']} ms errors {row['errors']} wrong {row['wrong']}", flush=True)
                        time.sleep(0.5)
        except RuntimeError as error:
            print(f"peer infinity-{engine} skipped: {error}", flush=True)
            measured[f"infinity-{engine}"] = {"skipped": str(error)}
            continue
        measured[f"infinity-{engine}"] = {
            level: {"req_s": round(statistics.median(r["req_s"] for r in rs), 1),
                    "p50_ms": round(statistics.median(r["p50_ms"] for r in rs), 2),
                    "errors": sum(r["errors"] for r in rs), "wrong": sum(r["wrong"] for r in rs),
                    "sample_errors": [e for r in rs for e in r["sample_errors"]][:3]}
            for level, rs in rounds.items()}
    return measured


def _best_peer(measured: dict[str, Any], level: int) -> tuple[str, float] | None:
    rates = [(name, rows[level]["req_s"]) for name, rows in measured.items()
             if "skipped" not in rows and level in rows and rows[level]["errors"] + rows[level]["wrong"] == 0]
    return max(rates, key=lambda pair: pair[1]) if rates else None


def targets(rows: list[dict[str, Any]], measured: dict[str, Any], ort: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 13's targets, each with what was measured and PASS/FAIL."""
    by_level = {r["concurrency"]: r for r in rows}
    found: list[dict[str, Any]] = []
    for level in (8, 32, 64):
        best = _best_peer(measured, level) if "skipped" not in measured else None
        if level in by_level and best:
            got = by_level[level]["req_s"]
            found.append({"target": f"c={level} >= {PEER_FACTOR} x best peer ({best[0]}, {best[1]:.0f} req/s)",
                          "measured": f"{got:.1f} req/s ({got / best[1]:.2f} x)", "pass": got >= PEER_FACTOR * best[1]})
    for level, factor in ORT_FACTORS.items():
        if level in by_level:
            got = by_level[level]["req_s"]
            found.append({"target": f"c={level} >= {factor} x in-process ONNX Runtime fp32 ({ort['sentences_per_s']:.0f}/s)",
                          "measured": f"{got:.1f} req/s ({got / ort['sentences_per_s']:.2f} x)",
                          "pass": got >= factor * ort["sentences_per_s"]})
    if 1 in by_level:
        need = ort["one_sentence_ms_p50"] + P50_SLACK_MS
        got = by_level[1]["p50_ms"]
        found.append({"target": f"c=1 p50 <= in-process ONNX Runtime one sentence ({ort['one_sentence_ms_p50']:.1f} ms, "
                                f"{ort['latency_threads']} thread) + {P50_SLACK_MS:.0f} ms",
                      "measured": f"{got:.1f} ms", "pass": got <= need})
    probed = [r for r in rows if "health_p99_ms" in r]
    if probed:
        got = probed[-1]["health_p99_ms"]
        found.append({"target": f"GET /health p99 < {HEALTH_P99_MS:.0f} ms at c={probed[-1]['concurrency']}",
                      "measured": f"{got:.1f} ms", "pass": got < HEALTH_P99_MS})
    return found


def render(rows: list[dict[str, Any]], measured: dict[str, Any], ort: dict[str, Any], pipeline_rate: float,
           found: list[dict[str, Any]]) -> str:
    """The side-by-side table (req/s; ratios to both ceilings and the best peer) and the targets."""
    names = [n for n in measured if "skipped" not in measured[n]] if "skipped" not in measured else []
    lines = [
        (f"In-process ONNX Runtime fp32 (the product's export, {ort['threads']} threads, length-sorted batches of "
         f"{ort['batch']}): **{ort['sentences_per_s']:.0f} sentences/s** ({ort['best_way']}; "
         f"{', '.join(f'{k} {v:.0f}' for k, v in ort['per_way'].items())}), min cosine to torch "
         f"{ort['min_cosine_to_torch']:.6f}; one sentence p50 {ort['one_sentence_ms_p50']:.1f} ms "
         f"({ort['latency_threads']} thread). Pipeline ceiling: {pipeline_rate:.0f} sentences/s."),
        "",
        ("| clients | product req/s | " + " | ".join(f"{n} req/s" for n in names)
         + " | x best peer | x ORT ceiling | x pipeline ceiling |"),
        "|---:|---:|" + "---:|" * len(names) + "---:|---:|---:|",
    ]
    for r in rows:
        level, got = r["concurrency"], r["req_s"]
        cells = [f"{measured[n][level]['req_s']:.1f}" + ("" if measured[n][level]["errors"] + measured[n][level]["wrong"] == 0
                                                        else f" ({measured[n][level]['errors']} err, {measured[n][level]['wrong']} wrong)")
                 if level in measured[n] else "-" for n in names]
        best = _best_peer(measured, level) if names else None
        lines.append(f"| {level} | {got:.1f} | " + " | ".join(cells) + (" | " if cells else "")
                     + (f"{got / best[1]:.2f}" if best else "-")
                     + f" | {got / ort['sentences_per_s']:.2f} | {got / pipeline_rate:.2f} |")
    for name, rows_or_skip in ({"infinity": measured} if "skipped" in measured else measured).items():
        if "skipped" in rows_or_skip:
            lines += ["", f"{name}: skipped ({rows_or_skip['skipped']})."]
    lines += ["", "| target (issue 13) | measured | result |", "|---|---|---|"]
    lines += [f"| {t['target']} | {t['measured']} | {'PASS' if t['pass'] else 'FAIL'} |" for t in found]
    return "\n".join(lines) + "\n"
