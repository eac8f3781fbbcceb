"""`python -m bench.otel_cost`: the CPU the traced code paths cost per request, in process, export included.

bench.tiny measures the whole product with traces off and on; on a shared machine its rounds spread by 20%,
more than the cost it looks for. This runs observe.tracing's own functions, as the web and the worker call
them, in a fresh process per configuration (so each sets tracing up once, from the standard OTEL_*
environment), and reads that process' CPU time, its BatchSpanProcessor's export thread included (flushed
before the clock stops), to an OTLP/HTTP sink (bench.otlp_sink):

- web: a request's SERVER span continuing a client's traceparent (observe.server_span.serve_traced; with a
  --sampler other than always_on, no client traceparent: the sampler decides at the root), the trace context
  put in the wire message, the span's annotation and trace id for the log line;
- worker: batches of --batch requests carrying the trace contexts the web wrote, each sampled request's queue
  span, the batch span linked to them, its forward and its reply.

Configurations: `off` (no endpoint: the hot path's one test), `sdk` (what the product uses: the SDK's
TracerProvider, BatchSpanProcessor and OTLP/HTTP exporter as they ship). Rounds alternate the configurations;
medians reported.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ("off", "sdk")
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of the process: the export thread's too
    return usage.ru_utime + usage.ru_stime


def _child(config: str, requests: int, batch: int, client_parent: bool) -> dict[str, float]:
    """In a fresh process: CPU microseconds per request of the web and the worker paths under one configuration.

    client_parent: each request comes with a sampled client traceparent (else the sampler decides at the root);
    the worker's batches carry the trace contexts the web put in its wire messages.
    """
    import django

    django.setup()
    from models_registry.observe import server_span, tracing
    from models_registry.worker import batch_spans

    tracing.setup("web")
    scope = {"type": "http", "method": "POST", "path": "/models/tiny", "headers": [
        (b"host", b"127.0.0.1:8000"), (b"authorization", b"Bearer x"), (b"content-type", b"application/json"),
        *([(b"traceparent", TRACEPARENT.encode())] if client_parent else [])]}
    wires: list[tuple[str, str]] = []

    async def send(message: dict[str, Any]) -> None:
        pass

    async def handle(scope: dict[str, Any], receive: Any, send: Any) -> None:
        wire = tracing.wire_context() if tracing.tracer is not None else ("", "")
        wires.append(wire)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        if tracing.tracer is not None:
            tracing.annotate("tiny", 3, 7, inputs=1)
        await send({"type": "http.response.body", "body": b"{}"})

    async def web(count: int) -> None:
        for _ in range(count):
            if tracing.tracer is None:
                await handle(scope, None, send)
            else:
                await server_span.serve_traced(scope, None, send, handle)

    def worker(count: int) -> None:
        now = time.time()
        for number in range(count // batch):
            if tracing.tracer is None:
                continue
            first = number * batch % max(1, len(wires) - batch)
            carried = [(*wire, now - 0.010) for wire in wires[first:first + batch]]
            traced = batch_spans.BatchTrace()
            batch_spans.record_batch(traced, carried, now - 0.005, now - 0.004, now, {
                "hosting.model": "tiny", "hosting.task": "feature-extraction", "hosting.batch.size": batch,
                "hosting.batch.requests": batch, "hosting.batch.reason": "full", "hosting.batch.tokens": 20 * batch,
                "hosting.batch.padded_tokens": 24 * batch, "hosting.device": "cpu", "hosting.backend": "torch"})
            batch_spans.record_reply(traced, batch, now, now + 0.001)

    def flush() -> None:
        tracing.flush()

    asyncio.run(web(min(500, requests)))  # warm: imports, caches, the exporter's connection
    worker(min(512, requests))
    flush()
    found = {}
    for name, run in (("web", lambda: asyncio.run(web(requests))), ("worker", lambda: worker(requests))):
        started, inline = _cpu(), time.thread_time()
        run()
        found[f"{name} inline"] = (time.thread_time() - inline) / requests * 1e6
        flush()
        found[name] = (_cpu() - started) / requests * 1e6
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    """Run every configuration --rounds times, rotated, and print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sampler", default="always_on", metavar="SAMPLER[:ARG]",
                        help="OTEL_TRACES_SAMPLER (e.g. parentbased_traceidratio:0.1: requests then come without a "
                             "client traceparent, the sampler decides at the web)")
    parser.add_argument("--child", choices=CONFIGS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.requests, args.batch, args.sampler == "always_on")))
        return 0
    port = _free_port()
    sink = subprocess.Popen([sys.executable, "-m", "bench.otlp_sink", str(port)], cwd=ROOT)
    load_start = os.getloadavg()
    found: dict[str, list[dict[str, float]]] = {config: [] for config in CONFIGS}
    try:
        for round_no in range(args.rounds):
            for config in CONFIGS[round_no % 2:] + CONFIGS[:round_no % 2]:
                env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
                env["DJANGO_SETTINGS_MODULE"] = "hosting.settings"
                if config != "off":
                    name, _, argument = args.sampler.partition(":")
                    env.update(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}", OTEL_TRACES_SAMPLER=name,
                               **({"OTEL_TRACES_SAMPLER_ARG": argument} if argument else {}))
                command = ["--child", config, "--requests", str(args.requests), "--batch", str(args.batch),
                           "--sampler", args.sampler]
                done = subprocess.run([sys.executable, "-m", "bench.otel_cost", *command], cwd=ROOT, env=env,
                                      capture_output=True, text=True, timeout=600, check=True)
                found[config].append(json.loads(done.stdout.strip().splitlines()[-1]))
                print(f"round {round_no + 1} {config}: {found[config][-1]}", flush=True)
    finally:
        sink.terminate()
        sink.wait()
    print(f"\nCPU us per request, medians of {args.rounds} rounds of {args.requests} requests (worker: batches of "
          f"{args.batch}), sampler {args.sampler}; load average {load_start[0]:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end, {os.cpu_count()} CPUs\n")
    print("| configuration | web us/request | worker us/request | both |\n|---|---:|---:|---:|")
    for config, rows in found.items():
        web, worker = (statistics.median(r[role] for r in rows) for role in ("web", "worker"))
        print(f"| {config} | {web:.1f} | {worker:.1f} | {web + worker:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
