"""The benchmark's report: medians over rounds, the service targets with PASS/FAIL, the markdown table."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

THROUGHPUT_TARGET = 0.85  # x ceiling at c=32 and c=64
P50_SLACK_MS = 3.0  # c=1 p50 <= in-process one-sentence latency + this
HEALTH_P99_MS = 50.0


def median_of(rounds: list[dict[str, Any]], key: str) -> float:
    """Median of a numeric key over rounds (ignoring NaN)."""
    values = [r[key] for r in rounds if r.get(key) is not None and not np.isnan(r[key])]
    return round(statistics.median(values), 2) if values else float("nan")


def aggregate(per_level: dict[int, list[dict[str, Any]]], ceiling_rate: float) -> list[dict[str, Any]]:
    """Per level: medians over rounds of rates, percentiles and CPU; sums of errors and wrong answers."""
    rows = []
    for level, rounds in per_level.items():
        row: dict[str, Any] = {"concurrency": level, "rounds": len(rounds)}
        for key in ("req_s", "p50_ms", "p95_ms", "p99_ms"):
            row[key] = median_of(rounds, key)
        row["x_ceiling"] = round(row["req_s"] / ceiling_rate, 3) if ceiling_rate else None
        row["errors"] = sum(r["errors"] for r in rounds)
        row["wrong"] = sum(r["wrong"] for r in rounds)
        row["answers"] = sum(r["answers"] for r in rounds)
        for field in ("cpu_ms_per_request", "cpu_cores"):
            names = rounds[0][field].keys()
            row[field] = {n: round(statistics.median(r[field].get(n, 0.0) for r in rounds), 3) for n in names}
        batch = [r["server_headers_mean"].get("x-batch-size") for r in rounds if r["server_headers_mean"]]
        row["mean_batch_size"] = round(statistics.median(batch), 1) if batch else None
        health = [r["health"] for r in rounds if r["health"]]
        if health:
            row["health_p99_ms"] = round(statistics.median(h["p99_ms"] for h in health), 2)
            row["health_max_ms"] = max(h["max_ms"] or 0 for h in health)
            row["health_errors"] = sum(h["errors"] for h in health)
        rows.append(row)
    return rows


def evaluate_targets(rows: list[dict[str, Any]], ceil: dict[str, Any]) -> list[dict[str, Any]]:
    """The service targets, each with its measured value and PASS/FAIL."""
    by_level = {r["concurrency"]: r for r in rows}
    targets = []
    for level in (32, 64):
        if level in by_level:
            need = THROUGHPUT_TARGET * ceil["sentences_per_s"]
            got = by_level[level]["req_s"]
            targets.append({"target": f"throughput c={level} >= {THROUGHPUT_TARGET} x ceiling ({need:.0f} req/s)",
                            "measured": f"{got:.1f} req/s ({got / ceil['sentences_per_s']:.2f} x)",
                            "pass": got >= need})
    if 1 in by_level:
        need = ceil["one_sentence_ms_p50"] + P50_SLACK_MS
        got = by_level[1]["p50_ms"]
        targets.append({"target": f"p50 c=1 <= in-process one sentence + {P50_SLACK_MS:.0f} ms ({need:.1f} ms)",
                        "measured": f"{got:.1f} ms", "pass": got <= need})
    probed = [r for r in rows if "health_p99_ms" in r]
    if probed:
        got = probed[-1]["health_p99_ms"]
        targets.append({"target": f"GET /health p99 < {HEALTH_P99_MS:.0f} ms at c={probed[-1]['concurrency']}",
                        "measured": f"{got:.1f} ms", "pass": got < HEALTH_P99_MS})
    return targets


def render(report: dict[str, Any]) -> str:
    """The markdown report: ceiling, the level table, CPU per request, targets."""
    ceil, cfg = report["ceiling"], report["config"]
    lines = [
        f"Ceiling (in-process transformers pipeline, sorted by length, return_tensors, mean pooling, "
        f"{ceil['threads']} torch threads, {report['corpus']['size']} sentences of "
        f"{report['corpus']['min_words']}-{report['corpus']['max_words']} words, "
        f"median {report['corpus']['median_words']}): "
        f"**{ceil['sentences_per_s']:.0f} sentences/s** at batch {ceil['best_batch_size']} "
        f"(per batch size: {', '.join(f'{b}: {v:.0f}' for b, v in ceil['per_batch_size'].items())}); "
        f"one sentence p50 **{ceil['one_sentence_ms_p50']:.1f} ms**.",
        "",
        f"Product: {cfg['server']} x{cfg['webs']}, {cfg['workers']} worker(s) x "
        f"{cfg['torch_threads']} torch thread(s), max batch {cfg['max_batch_size']}, "
        f"delay {cfg['max_batch_delay_ms']} ms; closed loop, one sentence per request, "
        f"medians of {cfg['rounds']} interleaved rounds of {cfg['seconds']:.0f} s (+{cfg['warmup']:.1f} s warm-up).",
        "",
        "| clients | req/s | x ceiling | p50 ms | p95 ms | p99 ms | errors | wrong | mean batch |"
        " CPU ms/req web / worker / redis / client | other load (cores) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in report["levels"]:
        cpu, cores = r["cpu_ms_per_request"], r["cpu_cores"]
        lines.append(
            f"| {r['concurrency']} | {r['req_s']:.1f} | {r['x_ceiling']:.2f} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | "
            f"{r['p99_ms']:.1f} | {r['errors']} | {r['wrong']} | {r['mean_batch_size'] or '-'} | "
            f"{cpu.get('web', 0):.2f} / {cpu.get('worker', 0):.2f} / {cpu.get('redis', 0):.2f} / "
            f"{cpu.get('client', 0):.2f} | {cores.get('other', 0):.2f} |")
    probed = [r for r in report["levels"] if "health_p99_ms" in r]
    if probed:
        r = probed[-1]
        lines += ["", f"`GET /health` every {cfg['probe_interval_ms']:.0f} ms during c={r['concurrency']}: "
                      f"p99 {r['health_p99_ms']:.1f} ms (median over rounds), max {r['health_max_ms']:.1f} ms, "
                      f"errors {r['health_errors']}."]
    lines += ["", "| target | measured | result |", "|---|---|---|"]
    lines += [f"| {t['target']} | {t['measured']} | {'PASS' if t['pass'] else 'FAIL'} |" for t in report["targets"]]
    lines += ["", f"{report['machine']['cpus']} CPUs, load average at start {report['machine']['loadavg_start']}; "
                  f"`other load` is busy CPU of processes outside the benchmark during the window "
                  f"({ceil['other_load_cores']:.2f} cores during the ceiling). The ceiling spent "
                  f"{ceil['cpu_ms_per_sentence']:.1f} CPU ms per sentence; with 1 torch thread it ran "
                  f"{ceil['one_thread_sentences_per_s']:.0f} sentences/s."]
    noisy = max([ceil["other_load_cores"]] + [r["cpu_cores"].get("other", 0.0) for r in report["levels"]])
    if noisy > 0.25:
        lines += ["", f"**Warning:** other processes kept up to {noisy:.2f} cores busy during the measurements; "
                      "these numbers are not comparable with a quiet machine's."]
    return "\n".join(lines) + "\n"
