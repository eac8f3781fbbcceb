"""`python -m bench.generation` (make bench-generation): streamed generation, continuous vs static batching.

A GPT-2-small-shaped model (12 layers, 768 wide, 50,257 tokens; random weights, built in
a temp dir) is served three ways in the same run: this product with continuous batching
(the default), this product with HOSTING_CONTINUOUS_BATCHING=0 (static batches, as
before), and two peers, each in its own venv under bench-results/ and skipped with the reason
(in the table) when it cannot be installed or started: `transformers serve --continuous-batching`
(packages pinned in requirements-bench-generation.txt) and vLLM's CPU backend, `vllm serve`
(bench.vllm_peer; requirements-bench-vllm.txt); `--peers` picks them. All compute in the same
dtype (`--dtype`; by default bfloat16 where the CPU computes it in hardware, as an operator would
register the model there, else float32). Each level keeps 1, 8 or 32 streams open (closed
loop; each asks /v1/completions for 16-256 new tokens, the same seeded sequence for
every server), bounded by a window in seconds and a request count. Reported: aggregate
generated tokens/s (tokens received in the window / window), time to first token p50 and
p99, and the latency of a 4-token probe request sent one at a time beside the streams,
against its latency alone. Then issue 34's levels on the continuous server (bench.generation_levels):
a shared 1,000-token system prompt against unshared heads, a short whole answer after six long
ones (and on the static server), the fairness flood (three runs), 16 chats of 1 MB and a batch
job of generation lines, with the demo encoder on the same worker probed throughout; a table
says where the run stands against the issue's targets. `level` takes extra body fields and
collects answers: the structured-output and tools levels plug in there (bench.generation_structured,
bench.generation_tools). Appends each run to docs/bench/generation-cpu-2core.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import generation_structured
from bench import generation_tools
from bench import generation_levels
from bench import vllm_peer
from bench.generation_peer import Server, start_serve, stop
from bench.stack_setup import stopped_on_failure

ROOT = Path(__file__).resolve().parent.parent
PEERS = ("transformers-serve", vllm_peer.NAME)  # other servers, each in a venv of its own
PROMPTS = ["The cat sees", "A dog likes a book about history.", "Paris is", "Once upon a time the city of",
           "Every question quickly", "The lazy dog reads the blue sky and"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(prog="python -m bench.generation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="1,8,32")
    parser.add_argument("--seconds", type=float, default=40.0, help="window per level and server")
    parser.add_argument("--max-requests", type=int, default=200, help="requests per level and server at most")
    parser.add_argument("--min-tokens", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads of every server (1: two threads on two shared cores spin-wait)")
    parser.add_argument("--dtype", default=None, choices=("float32", "bfloat16"),
                        help="the weights both servers compute in (ours registered with it, serve's --dtype); "
                             "default: bfloat16 where this CPU computes it in hardware (AMX, AVX512-BF16), else float32")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds of the continuous server and serve (other order each round): medians shown")
    parser.add_argument("--only", default="", help="servers to run: continuous,static and the peers")
    parser.add_argument("--peers", default=",".join(PEERS),
                        help=f"peers to start beside ours (comma-separated, empty: none): {', '.join(PEERS)}")
    parser.add_argument("--structured", type=int, default=1,
                        help="1: the structured-output level (json_schema vs free rows at 8 streams, continuous)")
    parser.add_argument("--tools", type=int, default=1,
                        help="1: the tools level (tool_choice required vs auto chats at 8 streams, continuous)")
    parser.add_argument("--issue-levels", default="shared,whole,flood,hostile",
                        help="issue 34's levels to run on the continuous server (empty: none)")
    parser.add_argument("--flood-runs", type=int, default=3)
    parser.add_argument("--flood-tokens", type=int, default=64,
                        help="max_tokens of each of the flood's 128 sequences (the issue sent 512)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "bench" / "generation-cpu-2core.md"))
    args = parser.parse_args(argv)
    args.dtype = args.dtype or default_dtype()
    return args


def default_dtype() -> str:
    """What an operator would serve a decoder in on this CPU: bfloat16 where oneDNN computes it in hardware."""
    from models_registry.inference.cpu_packing import bfloat16_in_hardware

    return "bfloat16" if bfloat16_in_hardware() else "float32"


def build_model(dest: Path, vocab: int = 50257, layers: int = 12, hidden: int = 768, heads: int = 12) -> Path:
    """GPT-2 small's shape with random weights (or the one given); a byte-level BPE padded with added tokens to
    its vocabulary (50,257): every id the model can draw decodes."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from tests import model_factory

    bpe = model_factory._byte_level_bpe([model_factory.EOS])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=model_factory.EOS,
                                        eos_token=model_factory.EOS, pad_token=model_factory.EOS,
                                        model_max_length=1024)
    # The flood's and the 1 MB prompts' chats; it renders tools too (hermes), for the tools level, and without
    # them it renders what CHAT_TEMPLATE does.
    tokenizer.chat_template = model_factory.TOOLS_TEMPLATE
    tokenizer.add_tokens([f"<w{i}>" for i in range(vocab - len(tokenizer))])
    eos = tokenizer.convert_tokens_to_ids(model_factory.EOS)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=1024, n_embd=hidden, n_layer=layers, n_head=heads,
                        bos_token_id=eos, eos_token_id=eos, pad_token_id=eos)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        model.transformer.wte.weight[eos] = 0  # its logit 0 is never the top one: every answer runs its length
    model.generation_config.pad_token_id = eos
    model.generation_config.do_sample = False
    tokenizer.save_pretrained(str(dest))
    model.save_pretrained(str(dest))
    return dest


async def one_stream(client: httpx.AsyncClient, server: Server, prompt: str, tokens: int, counted: list[float],
                     firsts: list[float] | None = None, extra: dict[str, Any] | None = None,
                     answers: list[tuple[str, str | None]] | None = None,
                     chat: bool = False) -> tuple[float | None, float, int]:
    """(time to first token, total time, tokens) of one streamed completion.

    counted gets each token's arrival time, firsts the time to first token as soon as it comes
    (a request still running at the window's end counts too); extra: more body fields (a level's
    response_format, say); answers gets (text, finish_reason) of each completion. chat: the prompt as a
    user message to /v1/chat/completions, each chunk of content or of a tool call's arguments a token, and
    the generated tokens no chunk carried counted when the usage chunk says them.
    """
    asked: dict[str, Any] = {"prompt": prompt}
    if chat:  # usage at the end: the tokens no chunk carried (a forced call's markers and name) count then
        asked = {"messages": [{"role": "user", "content": prompt}], "stream_options": {"include_usage": True}}
    body = {"model": server.model, **asked, "max_tokens": tokens, "temperature": 0, "stream": True, **(extra or {})}
    route = "/v1/chat/completions" if chat else "/v1/completions"
    started = time.perf_counter()
    first, count, text, reason = None, 0, "", None
    async with client.stream("POST", f"{server.url}{route}", json=body, headers=server.headers) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{server.name}: {response.status_code} {(await response.aread())[:200]!r}")
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            choices = chunk.get("choices") or []
            reason = (choices[0].get("finish_reason") if choices else None) or reason
            generated = (chunk.get("usage") or {}).get("completion_tokens") or 0
            if generated > count:
                counted.extend([time.perf_counter()] * (generated - count))
                count = generated
            piece = (_chat_piece(choices[0]) if chat else choices[0].get("text")) if choices else None
            if piece:
                now = time.perf_counter()
                if first is None:
                    first = now - started
                    if firsts is not None:
                        firsts.append(first)
                count += 1
                text += piece
                counted.append(now)
    if answers is not None:
        answers.append((text, reason))
    return first, time.perf_counter() - started, count


def _chat_piece(choice: dict[str, Any]) -> str:
    """A chat chunk's content, else its tool call's arguments ("" for neither, as a call's opening)."""
    delta = choice.get("delta") or {}
    calls = delta.get("tool_calls") or [{}]
    return str(delta.get("content") or (calls[0].get("function") or {}).get("arguments") or "")


async def level(server: Server, streams: int, args: argparse.Namespace, extra: dict[str, Any] | None = None,
                answers: list[tuple[str, str | None]] | None = None,
                plan: list[tuple[str, int]] | None = None, probe_every_s: float | None = 0.5,
                chat: bool = False) -> dict[str, Any]:
    """streams closed-loop clients for the window, and the 4-token probe beside them.

    The hook of other levels: extra body fields for every request, answers collected, a plan of
    (prompt, max_tokens) instead of the seeded short prompts, no probe (probe_every_s None), chats (chat).
    """
    rng = random.Random(streams)
    plan = list(plan) if plan is not None else [(rng.choice(PROMPTS), rng.randint(args.min_tokens, args.max_tokens))
                                                for _ in range(args.max_requests)]
    plan.reverse()  # popped from the end: in order
    token_times: list[float] = []
    ttfts: list[float] = []
    probes: list[float] = []
    finished: list[int] = []
    started = time.perf_counter()
    until = started + args.seconds
    errors: list[str] = []
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=streams + 4)) as client:

        async def loop() -> None:
            while plan and time.perf_counter() < until:
                prompt, tokens = plan.pop()
                try:
                    await one_stream(client, server, prompt, tokens, token_times, ttfts, extra, answers, chat)
                    finished.append(1)
                except Exception as error:  # noqa: BLE001 - reported in the table
                    errors.append(str(error)[:200])
                    return

        async def probe() -> None:
            while probe_every_s is not None and time.perf_counter() < until:
                _, total, _ = await one_stream(client, server, "Paris is", 4, [])
                probes.append(total)
                await asyncio.sleep(probe_every_s)

        clients = [asyncio.ensure_future(loop()) for _ in range(streams)]
        prober = asyncio.ensure_future(probe())
        await asyncio.wait(clients, timeout=args.seconds + 5)
        prober.cancel()
        for task in clients:
            task.cancel()
        await asyncio.gather(*clients, prober, return_exceptions=True)
    window = min(time.perf_counter(), until) - started
    in_window = sum(1 for t in token_times if t <= until)
    return {"tokens_s": round(in_window / window, 1), "ttft_p50_ms": pct(ttfts, 50), "ttft_p99_ms": pct(ttfts, 99),
            "requests": f"{len(finished)}/{len(ttfts)}", "probe_p50_ms": pct(probes, 50), "errors": errors[:2]}


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One level's figures over rounds: the median of each figure, the requests and errors of every round."""
    merged: dict[str, Any] = {}
    for key in rows[0]:
        values = [row[key] for row in rows]
        if key == "errors":
            merged[key] = [error for value in values for error in value][:2]
        elif key == "requests":
            merged[key] = " + ".join(values)
        else:
            present = [value for value in values if value is not None]
            merged[key] = round(statistics.median(present), 1) if present else None
    return merged


def pct(values: list[float], q: int) -> float | None:
    """The q-th percentile in milliseconds (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    return round(1000 * ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))], 1)


async def solo_probe(server: Server) -> float:
    """The 4-token request's latency alone (median of five, after one warm-up)."""
    async with httpx.AsyncClient(timeout=120) as client:
        await one_stream(client, server, "Paris is", 4, [])
        times = [(await one_stream(client, server, "Paris is", 4, []))[1] for _ in range(5)]
    return round(1000 * statistics.median(times), 1)


ENCODER = "probe-encoder"  # the demo encoder, on the continuous server's worker: probed during issue 34's levels


def start_product(model_dir: Path, threads: int, dtype: str = "float32") -> tuple[Any, dict[str, Server]]:
    """One stack: a worker with continuous batching (and the demo encoder) and one with static batches."""
    from tests import model_factory
    from tests.stack import Stack

    # Nice 0 as the peer: the worker's default niceness (5) yields the cores to the web, and to everyone else.
    stack = Stack.create({"HOSTING_TORCH_THREADS": str(threads), "HOSTING_WORKER_NICE": "0"})
    with stopped_on_failure(stack):
        for name in ("gen-continuous", "gen-static"):
            stack.manage("register_model", name, "--source", str(model_dir), "--task", "text-generation",
                         "--max-batch-size", "40", "--timeout", "600", "--max-queue-size", "256",  # 32 + the probe
                         "--dtype", dtype)
        stack.manage("register_model", ENCODER, "--source", str(model_factory.minilm_path()), "--task",
                     "feature-extraction", "--pooling", "mean", "--normalize")
        token = stack.create_token("all")
        for name in ("flood-a", "flood-b"):
            stack.create_token(name)
        stack.start_worker({"HOSTING_WORKER_MODELS": f"gen-continuous,{ENCODER}"})
        stack.start_worker({"HOSTING_WORKER_MODELS": "gen-static", "HOSTING_CONTINUOUS_BATCHING": "0"})
        url = stack.start_web()
        stack.wait_ready(["gen-continuous", "gen-static", ENCODER])
    headers = {"Authorization": f"Bearer {token}"}
    return stack, {"continuous": Server("continuous", url, "gen-continuous", headers),
                   "static": Server("static", url, "gen-static", headers)}


def table(results: dict[str, dict[int, dict[str, Any]]], solo: dict[str, float],
          skipped: dict[str, str] | None = None) -> str:
    """The markdown table of a run; a server skipped gets a row with the reason."""
    lines = ["| server | streams | tokens/s | TTFT p50 ms | TTFT p99 ms | requests done/started | 4-token probe p50 ms "
             "(alone) | errors |", "|---|---:|---:|---:|---:|---:|---:|---|"]
    for name, levels in results.items():
        for streams, row in levels.items():
            lines.append(f"| {name} | {streams} | {row['tokens_s']} | {row['ttft_p50_ms']} | {row['ttft_p99_ms']} | "
                         f"{row['requests']} | {row['probe_p50_ms']} ({solo.get(name)}) | "
                         f"{'; '.join(row['errors']) or '-'} |")
    for name, why in (skipped or {}).items():
        lines.append(f"| {name} | - | skipped: {why} | | | | | |")
    return "\n".join(lines)


def ratio_table(results: dict[str, dict[int, dict[str, Any]]], peers: list[str]) -> str:
    """The continuous server against each peer that ran, level by level: tokens/s and TTFT p50, ours / theirs."""
    ours = results.get("continuous", {})
    peers = [peer for peer in peers if peer in results]
    if not ours or not peers:
        return ""

    def ratio(a: Any, b: Any) -> str:
        return f"{a / b:.2f}x" if a and b else "-"

    lines = ["| streams | continuous tokens/s | " + " | ".join(
        f"{peer} tokens/s (ours / theirs) | {peer} TTFT p50 ms (ours / theirs)" for peer in peers) + " |",
             "|---:|---:|" + "---:|---:|" * len(peers)]
    for streams, row in ours.items():
        cells = [f"{streams}", f"{row['tokens_s']}"]
        for peer in peers:
            theirs = results[peer].get(streams)
            if theirs is None:
                cells += ["-", "-"]
                continue
            cells += [f"{theirs['tokens_s']} ({ratio(row['tokens_s'], theirs['tokens_s'])})",
                      f"{theirs['ttft_p50_ms']} ({ratio(row['ttft_p50_ms'], theirs['ttft_p50_ms'])})"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def start_peer(name: str, model_dir: Path, args: argparse.Namespace, log_dir: Path
               ) -> tuple[Any, Server | None, str]:
    """(process, server, "") of one peer on loopback, or (None, None, why not)."""
    if name == vllm_peer.NAME:
        return vllm_peer.start(model_dir, args.threads, log_dir, args.dtype)
    return start_serve(model_dir, args.threads, log_dir, extra=["--dtype", args.dtype])


def main(argv: list[str] | None = None) -> None:
    """Build the model, start the servers, run every level on each, print and write the table."""
    args = parse_args(argv)
    peers = [name for name in PEERS if name in set(args.peers.split(","))]
    unknown = set(filter(None, args.peers.split(","))) - set(PEERS)
    if unknown:
        raise SystemExit(f"unknown peers {sorted(unknown)}: choose among {', '.join(PEERS)}")
    # --only filters ours and the peers; --peers says which peers start at all.
    wanted = (set(filter(None, args.only.split(","))) or {"continuous", "static", *PEERS}) & {
        "continuous", "static", *peers}
    levels = [int(x) for x in args.levels.split(",")]
    results: dict[str, dict[int, dict[str, Any]]] = {}
    issue: dict[str, Any] = {}
    solo: dict[str, float] = {}
    skipped: dict[str, str] = {}
    load = os.getloadavg()[0]
    structured: dict[str, Any] | None = None
    tools: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="bench-generation-") as tmp:
        model_dir = build_model(Path(tmp) / "gpt2-small-random")
        log_dir = ROOT / "bench-results"
        log_dir.mkdir(exist_ok=True)
        stack, servers = start_product(model_dir, args.threads, args.dtype)
        processes: list[Any] = []
        try:
            for name in (peer for peer in peers if peer in wanted):
                try:
                    process, server, why = start_peer(name, model_dir, args, log_dir)
                except Exception as error:  # noqa: BLE001 - ours still run; the reason goes in the table
                    process, server, why = None, None, f"it did not start: {str(error)[:300]}"
                if server is None:
                    skipped[name] = why
                    print(f"{name} skipped: {why}", flush=True)
                else:
                    processes.append(process)
                    servers[name] = server
            chosen = {name: server for name, server in servers.items() if name in wanted}
            for name, server in chosen.items():
                solo[name] = asyncio.run(solo_probe(server))
                results[name] = {}
            # Server by server: transformers serve goes on generating for clients that left at a window's end,
            # which would slow whichever server came next. Later rounds run the continuous server and the peers
            # again in the other order (the static one is minutes per request: once); the table's figures are
            # the medians of the rounds (this machine's load moves one window's figures by a third).
            runs: dict[str, dict[int, list[dict[str, Any]]]] = {name: {} for name in chosen}
            for round_ in range(args.rounds):
                names = [n for n in chosen if round_ == 0 or n != "static"]
                for name in names if round_ % 2 == 0 else names[::-1]:
                    for streams in levels:
                        got = asyncio.run(level(chosen[name], streams, args))
                        runs[name].setdefault(streams, []).append(got)
                        print(f"round {round_ + 1}", name, streams, got, flush=True)
            results = {name: {streams: median_row(rows) for streams, rows in by.items()} for name, by in runs.items()}
            if args.structured and "continuous" in chosen:
                structured = asyncio.run(generation_structured.pair(chosen["continuous"], args, level))
                print("structured", structured, flush=True)
            if args.tools and "continuous" in chosen:
                tools = asyncio.run(generation_tools.pair(chosen["continuous"], args, level))
                print("tools", tools, flush=True)
            if "continuous" in servers and args.issue_levels:
                issue = asyncio.run(issue_levels(stack, servers, args, model_dir))
        finally:
            for process in processes:
                stop(process)
            stack.stop()
    report = table(results, solo, skipped)
    against = ratio_table(results, peers)
    if against:
        report += "\n\n## Continuous against each peer\n\n" + against
    if issue:
        report += "\n\n" + issue_table(results, solo, issue, args)
    if structured is not None:
        report += "\n\n## Structured output\n\n" + generation_structured.table(structured)
    if tools is not None:
        report += "\n\n## Tool calls\n\n" + generation_tools.table(tools)
    print(report)
    notes = "".join(f"\n- {name} skipped: {why}" for name, why in skipped.items())
    out = Path(args.out)
    # The file keeps the history of runs: a run is appended under its own heading (the title once).
    head = "" if out.exists() else "# Streamed generation: continuous vs static batching (`make bench-generation`)\n"
    text = (
        f"{head}\n## Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n\n"
        f"{os.cpu_count()} CPUs seen (load average "
        f"{load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end), torch threads "
        f"{args.threads}; GPT-2 small shape (124M parameters, random weights, {args.dtype} in every server), greedy, prompts of 2-9 tokens, "
        f"{args.min_tokens}-{args.max_tokens} new tokens each (one seeded sequence per level), window "
        f"{args.seconds:g} s or {args.max_requests} requests per level; continuous and the peers: medians of {args.rounds} "
        f"rounds in alternating order. tokens/s: content chunks received in the "
        f"window / window. Probe: a 4-token request sent one at a time (0.5 s apart) beside the streams; in "
        f"brackets its latency alone.\n\n{report.replace(chr(10) + '## ', chr(10) + '### ')}\n{notes}\n")
    with out.open("a") as file:
        file.write(text)
    print(f"appended to {args.out}")


async def issue_levels(stack: Any, servers: dict[str, Server], args: argparse.Namespace, model_dir: Path
                       ) -> dict[str, Any]:
    """Issue 34's levels on the continuous server (bench.generation_levels), the encoder probed throughout."""
    from transformers import AutoTokenizer

    continuous = servers["continuous"]
    url, headers = continuous.url, continuous.headers
    probe = generation_levels.EncoderProbe(url, ENCODER, headers)
    wanted = set(args.issue_levels.split(","))
    out: dict[str, Any] = {}
    try:
        if "shared" in wanted:
            tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
            out["shared"], out["shared_probe"] = await probe.during(
                generation_levels.shared_prompt(continuous, args, tokenizer, level))
            print("shared", out["shared"]["ratio"], out["shared"]["shared"], out["shared"]["unshared"], flush=True)
        if "whole" in wanted:
            for name in ("continuous", "static"):
                out[f"whole_{name}"], out[f"whole_{name}_probe"] = await probe.during(
                    generation_levels.whole_answers(url, servers[name].model, headers))
                print("whole", name, out[f"whole_{name}"], flush=True)
        if "flood" in wanted:
            greedy, modest = ({"Authorization": f"Bearer {stack.tokens[t]}"} for t in ("flood-a", "flood-b"))
            out["floods"] = []
            for _ in range(args.flood_runs):
                result, seen = await probe.during(generation_levels.flood(url, continuous.model, greedy, modest,
                                                                          args.flood_tokens))
                out["floods"].append({**result, **seen})
                print("flood", out["floods"][-1], flush=True)
        if "hostile" in wanted:
            out["megabyte"], out["megabyte_probe"] = await probe.during(
                generation_levels.megabyte_chats(url, continuous.model, headers))
            out["job"], out["job_probe"] = await probe.during(
                generation_levels.generation_job(url, continuous.model, headers))
            print("hostile", out["megabyte"], out["megabyte_probe"], out["job"], out["job_probe"], flush=True)
    finally:
        await probe.stop()
    return out


def issue_table(results: dict[str, dict[int, dict[str, Any]]], solo: dict[str, float], issue: dict[str, Any],
                args: argparse.Namespace) -> str:
    """Where this run stands against issue 34's targets."""
    ours, peer = results.get("continuous", {}), results.get("transformers-serve", {})

    def ratio(a: Any, b: Any) -> str:
        return f"{a / b:.2f}x" if a and b else "-"

    lines = ["| target (issue 34) | measured | met |", "|---|---|---|"]
    for streams in (8, 32):
        if streams in ours and streams in peer:
            mine, theirs = ours[streams]["tokens_s"], peer[streams]["tokens_s"]
            lines.append(f"| tokens/s at {streams} streams >= 1.3x serve | {mine} vs {theirs}: {ratio(mine, theirs)} | "
                         f"{'yes' if theirs and mine >= 1.3 * theirs else 'no'} |")
    if 32 in ours and 32 in peer:
        for q in ("p50", "p99"):
            mine, theirs = ours[32][f"ttft_{q}_ms"], peer[32][f"ttft_{q}_ms"]
            met = mine is not None and theirs is not None and mine <= theirs
            lines.append(f"| TTFT {q} at 32 streams <= serve's | {mine} vs {theirs} ms | {'yes' if met else 'no'} |")
    if 32 in ours and solo.get("continuous"):
        probe = ours[32]["probe_p50_ms"]
        lines.append(f"| 4-token request beside 32 streams <= 2x alone | {probe} vs {solo['continuous']} ms: "
                     f"{ratio(probe, solo['continuous'])} | {'yes' if probe and probe <= 2 * solo['continuous'] else 'no'} |")
    if "shared" in issue:
        shared = issue["shared"]
        lines.append(f"| TTFT with a shared 1,000-token system prompt <= 0.3x unshared (8 streams) | "
                     f"p50 {shared['shared']['ttft_p50_ms']} vs {shared['unshared']['ttft_p50_ms']} ms: "
                     f"{shared['ratio']}x | {'yes' if shared['ratio'] is not None and shared['ratio'] <= 0.3 else 'no'} |")
    for name in ("continuous", "static"):
        whole = issue.get(f"whole_{name}")
        if whole:
            lines.append(f"| {name}: 4-token whole answer after six 500-token ones <= 0.35x their median | "
                         f"{whole['short_ms']} vs {whole['long_median_ms']} ms: {whole['ratio']}x | "
                         f"{'yes' if whole['ratio'] <= 0.35 else 'no'} |")
    for n, run in enumerate(issue.get("floods", []), 1):
        lines.append(f"| flood {n} ({FLOOD_DESC.format(args.flood_tokens)}): B's 8-token chat within 2 s, every "
                     f"answer 200, none lost | B {run['b_ms']} ms ({run['b_status']}), A {run['a_statuses']}, "
                     f"lost {run['lost']} | {'yes' if run['b_ms'] <= 2000 and run['lost'] == 0 else 'no'} |")
    probes = [(k, v) for k, v in issue.items() if k.endswith("_probe")] + [
        (f"flood {n}", run) for n, run in enumerate(issue.get("floods", []), 1)]
    for key, seen in probes:
        lines.append(f"| encoder probe waits <= 1 s during {key.removesuffix('_probe')} | longest "
                     f"{seen['probe_max_ms']} ms of {seen['probes']} probes, {seen['probe_failed']} failed | "
                     f"{'yes' if seen['probe_max_ms'] <= 1000 and not seen['probe_failed'] else 'no'} |")
    if "megabyte" in issue:
        lines.append(f"| 16 chats of 1 MB (one n=8): refused before compute | statuses {issue['megabyte']['statuses']} | "
                     f"{'yes' if issue['megabyte']['statuses'] == [400] else 'no'} |")
    if "job" in issue:
        job = issue["job"]
        lines.append(f"| batch job of 64 generation lines | {job['status']} in {job['seconds']} s, "
                     f"{job['failed_lines']} failed | {'yes' if job['status'] == 'completed' else 'no'} |")
    return "\n".join(lines)


FLOOD_DESC = "2 x 8 prompts x n=8 streamed, {} tokens each"


if __name__ == "__main__":
    main()
