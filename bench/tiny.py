"""`python -m bench.tiny`: the hop alone, beside its peers in the same run.

A 2-layer BERT with hidden size 32 (random weights, built in a temp dir) costs almost
nothing to compute, so what this measures is the serving path: requests per second and
latency at each concurrency, the CPU per request of every process (web, worker, Redis,
client), and a sampling profile of the web process under load (docs/bench). Infinity
(torch engine) and LitServe serve the same model in the same run; all servers stay up
and every level is run on each in turn (order rotated each round), so the figures are
side by side; or, with --together, on all of them at once. `make bench` runs this after the demo model's run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from bench import corpus, loadgen, profiling, tiny_peers
from bench.comparison import _free_port
from bench.procstat import CpuMeter
from bench.stack_setup import stopped_on_failure

ROOT = Path(__file__).resolve().parent.parent
MODEL = "tiny-bert"
PRODUCT = "product"
TRACED = f"{PRODUCT}+otel"
UNSAMPLED_ARM = f"{TRACED} unsampled"  # --otel-arms: the traced product's processes, no request sampled


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; --quick: one short round."""
    parser = argparse.ArgumentParser(prog="python -m bench.tiny", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="1,16,64")
    parser.add_argument("--seconds", type=float, help="window per level (default 6; quick 3)")
    parser.add_argument("--warmup", type=float, help="warm-up per level (default 1; quick 0.5)")
    parser.add_argument("--rounds", type=int, help="rounds; medians are reported (default 3; quick 1)")
    parser.add_argument("--max-requests", type=int, default=50000)
    parser.add_argument("--webs", type=int, default=0,
                        help="web processes on the product's port (default: what `make run` starts)")
    parser.add_argument("--workers", type=int, default=0, help="runworker processes (default: what `make run` starts)")
    parser.add_argument("--corpus-size", type=int, default=1000)
    parser.add_argument("--profile-seconds", type=float, default=6.0,
                        help="py-spy window on the web and worker processes at the top level (0: none)")
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--only", default="", help="servers to run, comma-separated (product,infinity-torch,litserve)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="extra environment for the product's processes (repeatable)")
    parser.add_argument("--baseline", action="append", default=[], metavar="GIT_REF",
                        help="also run the product as of this commit, side by side (before/after; repeatable)")
    parser.add_argument("--otel", action="store_true",
                        help="also run the product with traces on (every request sampled, exported to a local OTLP "
                             "sink: bench.otlp_sink), side by side with it off")
    parser.add_argument("--otel-sampler", default="always_on", metavar="SAMPLER[:ARG]",
                        help="OTEL_TRACES_SAMPLER of the traced product (e.g. parentbased_traceidratio:0.1)")
    parser.add_argument("--otel-first", action="store_true",
                        help="start the traced product before the untraced one (on the 2-core machine the start "
                             "order moved the ratio by 4.5-7.5 points: a pair of runs, one each way, cancels that)")
    parser.add_argument("--otel-arms", action="store_true",
                        help="with --otel: load the traced product twice a round, by the same processes, its "
                             "requests carrying a sampled W3C traceparent (flags 01) and an unsampled one (00), under "
                             "the SDK's default parentbased_always_on: their ratio is the sampled spans' cost, free of "
                             "the stacks' start order and placement")
    parser.add_argument("--baseline-webs", type=int, default=1,
                        help="web processes of the --baseline products (1: make run's layout before issue 20)")
    parser.add_argument("--out", default=str(ROOT / "bench-results"))
    parser.add_argument("--profile-dir", default=str(ROOT / "docs" / "bench"),
                        help="where tiny-web-profile.md and tiny-worker-profile.md go")
    parser.add_argument("--together", action="store_true",
                        help="load every server at once, each with the level's clients (a round's servers then share "
                             "the machine's every moment: on a noisy machine, their ratio is the steadier figure)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    for name, full, short in (("seconds", 6.0, 3.0), ("warmup", 1.0, 0.5), ("rounds", 3, 1)):
        if getattr(args, name) is None:
            setattr(args, name, short if args.quick else full)
    if args.otel_arms:
        if not args.otel:
            parser.error("--otel-arms needs --otel")
        if args.otel_sampler == "always_on":  # the flag's default: the parent-based one honours the client's flags
            args.otel_sampler = "parentbased_always_on"
        if not args.otel_sampler.startswith("parentbased_"):
            parser.error("--otel-arms needs a parent-based sampler (the arms differ by the traceparent's flags)")
    args.levels = [int(v) for v in args.levels.split(",") if v.strip()]
    args.only = [v.strip() for v in args.only.split(",") if v.strip()]
    return args


def _model_cost(model_dir: str, sentences: list[str]) -> dict[str, Any]:
    """In a spawned process: references, and the model's own CPU per sentence (tokenize, forward, pool)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    torch.set_num_threads(1)
    tokenizer, model = AutoTokenizer.from_pretrained(model_dir), AutoModel.from_pretrained(model_dir).eval()
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    vectors = np.zeros((len(sentences), model.config.hidden_size), dtype=np.float32)

    def run(batch: int) -> None:
        with torch.inference_mode():
            for start in range(0, len(order), batch):
                idx = order[start:start + batch]
                enc = tokenizer([sentences[i] for i in idx], padding=True, truncation=True, return_tensors="pt")
                hidden = model(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                vectors[idx] = torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()

    run(32)
    cpu = {}
    for batch in (1, 32):
        t0 = time.process_time()
        run(batch)
        cpu[batch] = 1000 * (time.process_time() - t0) / len(sentences)
    return {"reference": vectors, "cpu_ms_per_sentence_batch1": round(cpu[1], 3),
            "cpu_ms_per_sentence_batch32": round(cpu[32], 3)}


def baseline_tree(ref: str, workdir: Path) -> Path:
    """The product's code at git ref, unpacked under workdir (run with this venv), for a before/after run."""
    tree = workdir / f"baseline-{ref.replace('/', '_')}"
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", ref], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def start_product(args: argparse.Namespace, model_dir: Path, root: Path | None = None,
                  webs: int = 0, env: dict[str, str] | None = None) -> tuple[Any, list[str], str]:
    """The product as `make run` lays it out, serving the tiny model: (stack, URLs, token).

    root: another checkout of the product to start instead of this one (--baseline); env: more
    environment for its processes (--otel).
    """
    from models_registry.capacity import sizing
    from tests import stack as stack_module

    layout = sizing.default_layout(sizing.available_cores(), workers=args.workers)
    extra = {**dict(pair.split("=", 1) for pair in args.env), **(env or {})}
    own_root = stack_module.ROOT
    stack_module.ROOT = root or own_root  # the processes' working directory, so their code
    try:
        return _start_product(model_dir, layout, extra, webs)
    finally:
        stack_module.ROOT = own_root


def _start_product(model_dir: Path, layout: Any, extra: dict[str, str], webs: int) -> tuple[Any, list[str], str]:
    from models_registry.capacity import sizing
    from tests.stack import Stack

    stack = Stack.create({"HOSTING_TORCH_THREADS": str(layout.threads), **extra})
    with stopped_on_failure(stack):
        stack.manage("register_model", MODEL, "--source", str(model_dir), "--task", "feature-extraction",
                     "--pooling", "mean", "--normalize", "--max-batch-size", "32", "--max-batch-delay-ms", "5",
                     "--timeout", "60", "--max-queue-size", "4096")
        token = stack.create_token("all")
        for _ in range(layout.workers):
            stack.start_worker()
        urls = [stack.start_web(processes=sizing.web_processes(sizing.available_cores(), webs))]
        stack.wait_ready([MODEL])
    return stack, urls, token


def _otlp_sink(running: ExitStack, sampler: str = "always_on") -> dict[str, str]:
    """Start bench.otlp_sink on a free port (stopped with the run): the traced product's environment."""
    port = _free_port()
    sink = subprocess.Popen([sys.executable, "-m", "bench.otlp_sink", str(port)], cwd=ROOT)
    running.callback(lambda: (sink.terminate(), sink.wait(10)))
    name, _, argument = sampler.partition(":")
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_TRACES_SAMPLER": name,
            **({"OTEL_TRACES_SAMPLER_ARG": argument} if argument else {})}


def _groups_of_product(stack: Any) -> dict[str, list[int]]:
    return {"web": [p.pid for p, _ in stack.web], "worker": [p.pid for p in stack.workers],
            "redis": [stack.redis.process.pid] if stack.redis else [], "client": [os.getpid()]}


def run_level(urls: list[str], requests: dict[str, list[bytes]], level: int, args: argparse.Namespace, offset: int,
              meter: CpuMeter, reference: np.ndarray, extract: Any) -> dict[str, Any]:
    """One closed-loop level on one server: rate, latency, CPU ms per request of each group."""
    result, answers = asyncio.run(loadgen.run_level(urls, requests, level, args.warmup, args.seconds,
                                                    args.max_requests, offset=offset, on_window=meter.mark))
    return _row(result, answers, meter, reference, extract)


def run_together(servers: dict[str, dict[str, Any]], level: int, args: argparse.Namespace, offset: int,
                 reference: np.ndarray) -> dict[str, dict[str, Any]]:
    """One closed-loop level on every server at once (each with `level` clients): {server: its row}.

    The servers share the machine's CPUs at every moment instead of taking turns, so what slows the machine
    slows them all alike. Saturated, each server's processes get about an equal share of the CPUs, and the
    ratio of two servers' rates is the inverse ratio of their CPU a request. The client's CPU in each row is
    the one client process serving all of them.
    """
    meters = {name: CpuMeter(dict(server["groups"]), without_children=("client",)) for name, server in servers.items()}

    async def all_at_once() -> list[Any]:
        return await asyncio.gather(*(loadgen.run_level(server["urls"], server["requests"], level, args.warmup,
                                                        args.seconds, args.max_requests, offset=offset,
                                                        on_window=meters[name].mark)
                                      for name, server in servers.items()))

    return {name: _row(result, answers, meters[name], reference, servers[name]["extract"])
            for name, (result, answers) in zip(servers, asyncio.run(all_at_once()))}


def _row(result: Any, answers: list[Any], meter: CpuMeter, reference: np.ndarray, extract: Any) -> dict[str, Any]:
    loadgen.check_answers(result, answers, reference, extract=extract)
    cpu = meter.between("start", "end")
    done = max(result.completed, 1)
    window = max(result.window_s, 1e-9)
    return {"req_s": round(result.completed / window, 1),
            "p50_ms": round(loadgen.percentile(result.latencies_ms, 50), 2),
            "p99_ms": round(loadgen.percentile(result.latencies_ms, 99), 2),
            "errors": result.errors, "wrong": result.wrong, "sample_errors": result.sample_errors[:3],
            "cpu_ms_per_request": {k: round(1000 * v / done, 3) for k, v in cpu.items()},
            "cpu_cores": {k: round(v / window, 2) for k, v in cpu.items()}}


def _median_rows(rounds: dict[int, list[dict[str, Any]]]) -> dict[int, dict[str, Any]]:
    rows = {}
    for level, runs in rounds.items():
        med = lambda key: round(statistics.median(r[key] for r in runs), 2)  # noqa: E731
        groups = runs[0]["cpu_ms_per_request"].keys()
        rows[level] = {"req_s": med("req_s"), "p50_ms": med("p50_ms"), "p99_ms": med("p99_ms"),
                       "errors": sum(r["errors"] for r in runs), "wrong": sum(r["wrong"] for r in runs),
                       "sample_errors": [e for r in runs for e in r["sample_errors"]][:3],
                       "cpu_ms_per_request": {g: round(statistics.median(r["cpu_ms_per_request"][g] for r in runs), 3)
                                              for g in groups},
                       "cpu_cores": {g: round(statistics.median(r["cpu_cores"][g] for r in runs), 2) for g in groups}}
    return rows


def main(argv: list[str] | None = None) -> int:
    """Build the model, start every server, run the levels side by side, profile the web, report."""
    args = parse_args(argv)
    loadgen.use_uvloop()
    started = time.time()
    load_start = [round(v, 2) for v in os.getloadavg()]
    sentences = corpus.build_corpus(args.corpus_size, 20240611)
    workdir = Path(tempfile.mkdtemp(prefix="bench-tiny-"))
    from tests.model_factory import build_feature_extractor

    model_dir = build_feature_extractor(workdir / "model")
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        cost = pool.submit(_model_cost, str(model_dir), sentences).result()
    reference = cost.pop("reference")
    print(f"tiny model: {model_dir}; in-process CPU per sentence {cost}", flush=True)
    servers: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    wanted = lambda name: not args.only or name in args.only  # noqa: E731
    with ExitStack() as running:
        if wanted(PRODUCT):
            products = [(PRODUCT, None, {})] + [(f"{PRODUCT}@{ref}", baseline_tree(ref, workdir), {})
                                                for ref in args.baseline]
            if args.otel:
                traced = (TRACED, None, _otlp_sink(running, args.otel_sampler))
                if args.otel_first:
                    products.insert(0, traced)
                else:
                    products.append(traced)
            for name, root, env in products:
                stack, urls, token = start_product(args, model_dir, root, env=env,
                                                   webs=args.baseline_webs if root else args.webs)
                running.callback(stack.stop)
                arms = [(name, None)]
                if name == TRACED and args.otel_arms:
                    arms = [(name, "01"), (UNSAMPLED_ARM, "00")]
                for arm, flags in arms:
                    servers[arm] = {"urls": urls, "groups": _groups_of_product(stack), "extract": json.loads,
                                    "requests": {u: loadgen.inference_requests(u, MODEL, token, sentences, flags)
                                                 for u in urls}}
        if not args.no_peers:
            found, skipped = tiny_peers.available(model_dir, _free_port)
            for peer in found:
                if not wanted(peer.name):
                    continue
                try:
                    url, pid = running.enter_context(tiny_peers.running(peer, workdir))
                except RuntimeError as error:
                    skipped[peer.name] = str(error)
                    continue
                servers[peer.name] = {"urls": [url], "requests": {url: peer.requests(url, sentences)},
                                      "groups": {"server": [pid], "client": [os.getpid()]}, "extract": peer.vector_of}
        for name, server in servers.items():  # warm every server up once
            asyncio.run(loadgen.run_level(server["urls"], server["requests"], max(args.levels), 0.0, 2.0, 10**9))
        rounds: dict[str, dict[int, list[dict[str, Any]]]] = {n: {lv: [] for lv in args.levels} for n in servers}
        names = list(servers)
        for round_no in range(args.rounds):
            levels = args.levels if round_no % 2 == 0 else list(reversed(args.levels))
            for level in levels:
                offset = round_no * 7919 + level * 31
                if args.together:
                    rows = run_together(servers, level, args, offset, reference)
                else:
                    rows = {}
                    for name in names[round_no % len(names):] + names[:round_no % len(names)]:
                        server = servers[name]
                        meter = CpuMeter(dict(server["groups"]), without_children=("client",))
                        rows[name] = run_level(server["urls"], server["requests"], level, args, offset, meter,
                                               reference, server["extract"])
                        time.sleep(0.3)
                for name, row in rows.items():
                    rounds[name][level].append(row)
                    print(f"round {round_no + 1} c={level} {name}: {row['req_s']} req/s p50 {row['p50_ms']} ms "
                          f"p99 {row['p99_ms']} errors {row['errors']} wrong {row['wrong']} "
                          f"cpu ms/req {row['cpu_ms_per_request']}", flush=True)
                if args.together:
                    time.sleep(0.3)
        profiles: dict[str, str] = {}
        if PRODUCT in servers and args.profile_seconds > 0:
            profiles = _profile(servers[PRODUCT], max(args.levels), args, workdir)
    measured = {name: _median_rows(r) for name, r in rounds.items()}
    report = {"config": {k: v for k, v in vars(args).items() if k not in ("out",)}, "model_cost": cost,
              "paired": paired_ratios(rounds),
              "machine": {"cpus": os.cpu_count(), "loadavg_start": load_start,
                          "loadavg_end": [round(v, 2) for v in os.getloadavg()]},
              "servers": measured, "skipped": skipped, "duration_s": round(time.time() - started, 1)}
    markdown = render(report)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tiny.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "tiny.md").write_text(markdown)
    written = [out / "tiny.json", out / "tiny.md"]
    for group, text in profiles.items():
        path = Path(args.profile_dir) / f"tiny-{group}-profile.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    print()
    print(markdown)
    print("written: " + ", ".join(str(p) for p in written))
    bad = sum(row["errors"] + row["wrong"] for row in measured.get(PRODUCT, {}).values())
    return 1 if bad else 0


def _profile(server: dict[str, Any], level: int, args: argparse.Namespace, workdir: Path) -> dict[str, str]:
    """py-spy profiles of the web and worker processes during an extra, uncounted level: {group: markdown}."""
    if profiling.py_spy() is None:
        print("no py-spy: the profiles are skipped (pip install -r requirements-dev.txt)", flush=True)
        return {}
    groups = ("web", "worker")

    async def load_and_record() -> dict[str, list[Path]]:
        load = asyncio.ensure_future(loadgen.run_level(server["urls"], server["requests"], level, 0.5,
                                                       args.profile_seconds + 1.5, 10**9))
        await asyncio.sleep(0.5)
        recorders = {g: profiling.start(server["groups"][g], args.profile_seconds, workdir / "profile", prefix=g)
                     for g in groups}
        paths = {g: await asyncio.to_thread(profiling.collect, r) for g, r in recorders.items()}
        await load
        return paths

    found = {}
    for group, paths in asyncio.run(load_and_record()).items():
        summary = profiling.summarize(paths)
        if summary["samples"]:
            title = f"Where the {group} process's CPU goes: tiny model, {level} clients (`python -m bench.tiny`)"
            found[group] = profiling.render(summary, title) + (
                f"\nRecorded {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
                f"load average {os.getloadavg()[0]:.2f} at the end.\n")
    return found


def paired_ratios(rounds: dict[str, dict[int, list[dict[str, Any]]]]) -> dict[str, dict[int, dict[str, Any]]]:
    """Each variant of the product (a baseline, +otel) against the product, round by round: req/s ratios.

    The rounds run the servers back to back, so a ratio within one round cancels most of the machine's drift
    from round to round (on a shared machine, 10-20% here); their median is the figure to quote. With an
    untraced copy in the run (--baseline), the traced product is also paired with the mean of every untraced
    copy of each round: the copies' own ratio (the A/A control) moved 5-8% either way on the 2-core machine.
    """
    if PRODUCT not in rounds:
        return {}
    copies, traced = [name for name in rounds if name.startswith(f"{PRODUCT}@")], TRACED
    # label -> (the variant, the untraced servers its rate is divided by, their mean when more than one)
    against: dict[str, tuple[str, tuple[str, ...]]] = {name: (name, (PRODUCT,)) for name in rounds
                                                        if name != PRODUCT and name.startswith(PRODUCT)}
    if copies and traced in rounds:
        against[f"{traced} / mean of {', '.join((PRODUCT, *copies))}"] = (traced, (PRODUCT, *copies))
    if UNSAMPLED_ARM in rounds and traced in rounds:  # --otel-arms: one stack, sampled over unsampled
        against[f"{traced} / {UNSAMPLED_ARM} (the same processes)"] = (traced, (UNSAMPLED_ARM,))
    paired: dict[str, dict[int, dict[str, Any]]] = {}
    for name, (variant, bases) in against.items():
        paired[name] = {}
        for level, runs in rounds[variant].items():
            ratios = []
            for index, run in enumerate(runs):
                base = statistics.mean(rounds[copy][level][index]["req_s"] for copy in bases)
                if base > 0:
                    ratios.append(round(run["req_s"] / base, 3))
            if ratios:
                paired[name][level] = {"ratios": ratios, "median": round(statistics.median(ratios), 3)}
                interval = median_interval(ratios)
                if interval is not None:
                    paired[name][level]["interval"] = interval
    return paired


def median_interval(values: list[float], draws: int = 2000, seed: int = 0) -> tuple[float, float] | None:
    """A 95% bootstrap interval of the median of values (the rounds drawn again with replacement, seeded: the
    same rounds give the same interval); None for fewer than five."""
    if len(values) < 5:
        return None
    draw = random.Random(seed)
    medians = sorted(statistics.median(draw.choices(values, k=len(values))) for _ in range(draws))
    return round(medians[int(0.025 * draws)], 3), round(medians[int(0.975 * draws) - 1], 3)


def render(report: dict[str, Any]) -> str:
    """The side-by-side table and the CPU split of the product."""
    servers, levels = report["servers"], report["config"]["levels"]
    cost = report["model_cost"]
    lines = [f"Tiny model (BERT, 2 layers, hidden 32, random weights; feature-extraction, mean pooling), "
             f"{report['config']['corpus_size']} sentences of 4-80 words, one per request, closed loop; medians of "
             f"{report['config']['rounds']} rounds of {report['config']['seconds']:g} s, servers "
             f"{'loaded all at once (--together)' if report['config'].get('together') else 'interleaved'}. "
             f"The model itself costs {cost['cpu_ms_per_sentence_batch32']:.2f} ms CPU per sentence in batches of "
             f"32 ({cost['cpu_ms_per_sentence_batch1']:.2f} ms alone), in process.", "",
             "| server | " + " | ".join(f"c={lv} req/s (p50 ms)" for lv in levels)
             + f" | CPU ms/req at c={levels[-1]} | cores at c={levels[-1]} |",
             "|---|" + "---:|" * len(levels) + "---|---:|"]
    for name, rows in servers.items():
        cells = []
        for lv in levels:
            r = rows[lv]
            bad = "" if r["errors"] + r["wrong"] == 0 else f" ({r['errors']} err, {r['wrong']} wrong)"
            cells.append(f"{r['req_s']:.1f} ({r['p50_ms']:.1f}){bad}")
        top = rows[levels[-1]]
        cpu = {k: v for k, v in top["cpu_ms_per_request"].items() if k != "other"}
        serving = sum(v for k, v in cpu.items() if k != "client")
        split = " / ".join(f"{k} {v:.2f}" for k, v in cpu.items())
        cores = sum(v for k, v in top["cpu_cores"].items() if k not in ("client", "other"))
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {serving:.2f} ({split}) | {cores:.2f} |")
    for name, why in report["skipped"].items():
        lines += ["", f"{name}: skipped ({why})."]
    if report.get("paired"):
        lines += ["", f"| variant / {PRODUCT}, req/s | level | median of the rounds' ratios | its 95% interval "
                      "(bootstrap) | each round |", "|---|---:|---:|---:|---|"]
        lines += [f"| {name} | c={level} | {pair['median']:.3f} | "
                  f"{'-'.join(f'{v:.3f}' for v in pair['interval']) if pair.get('interval') else '-'} | "
                  f"{', '.join(f'{r:.3f}' for r in pair['ratios'])} |"
                  for name, levels in report["paired"].items() for level, pair in levels.items()]
    if PRODUCT in servers:
        top_level = levels[-1]
        product = servers[PRODUCT][top_level]
        peers_rates = [rows[top_level]["req_s"] for n, rows in servers.items()
                       if not n.startswith(PRODUCT) and rows[top_level]["errors"] + rows[top_level]["wrong"] == 0]
        best = max(peers_rates) if peers_rates else None
        cpu = product["cpu_ms_per_request"]
        serving = sum(v for k, v in cpu.items() if k not in ("client", "other"))
        outside = serving - cost["cpu_ms_per_sentence_batch32"]
        targets = [
            (f"c={top_level} >= 1,000 req/s", f"{product['req_s']:.0f}", product["req_s"] >= 1000),
            (f"c={top_level} >= 1.5 x best peer", f"{product['req_s'] / best:.2f} x" if best else "-",
             bool(best) and product["req_s"] >= 1.5 * best),
            ("web CPU <= 0.5 ms/request", f"{cpu.get('web', 0):.2f} ms", cpu.get("web", 0) <= 0.5),
            ("all processes <= 2 ms CPU/request outside the model", f"{outside:.2f} ms", outside <= 2.0),
        ]
        if 1 in servers[PRODUCT]:
            p50 = servers[PRODUCT][1]["p50_ms"]
            targets.append(("c=1 p50 <= 3 ms", f"{p50:.1f} ms", p50 <= 3.0))
        lines += ["", "| target (issue 20, tiny model) | measured | result |", "|---|---|---|"]
        lines += [f"| {t} | {m} | {'PASS' if ok else 'FAIL'} |" for t, m, ok in targets]
    machine = report["machine"]
    lines += ["", f"{machine['cpus']} CPUs; load average {machine['loadavg_start']} at the start, "
                  f"{machine['loadavg_end']} at the end; `other` CPU (processes outside the run) per level is in "
                  "bench-results/tiny.json."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
