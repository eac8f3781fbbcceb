"""`python -m bench.hostile_schemas`: issue 50's hostile grammars for a bounded time, and what others wait meanwhile.

Two workers serve a tiny chat model and the demo embedder. Two hostile clients send, in
turn and without pause, issue 50's schemas (a 100,000-value enum, 20,000 properties, an
anyOf of 5,000 objects, a $ref loop, a required self-recursive object, each with a fresh
property name so that no cache helps) as `response_format` and as a forced tool's
parameters, for --seconds. Meanwhile another tenant's embeddings and `/health` are probed in
turn. Printed: each attack's answers by status, and the probes' p50, p99 and max.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests import model_factory
from tests.stack import Stack, http_json

CHAT, EMBED = "chat", "minilm"


def schemas(fresh: str) -> dict[str, dict[str, Any]]:
    """The attack schemas, each with a property named fresh (a changed name misses any cache keyed on text)."""
    return {
        "enum of 100,000": {"type": "object", "properties": {fresh: {"enum": [f"v{i}" for i in range(100_000)]}}},
        "20,000 properties": {"type": "object", "properties": {f"{fresh}{i}": {"type": "integer"}
                                                               for i in range(20_000)}},
        "anyOf of 5,000": {"anyOf": [{"type": "object", "properties": {f"{fresh}{i}": {"type": "integer"}},
                                      "required": [f"{fresh}{i}"]} for i in range(5000)]},
        "$ref loop": {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                      "title": fresh},
        "required self-recursion": {"type": "object", "properties": {fresh: {"$ref": "#"}}, "required": [fresh]},
    }


def attack_body(kind: str, schema: dict[str, Any]) -> dict[str, Any]:
    """A chat request whose response_format, or whose one forced tool, is schema."""
    body: dict[str, Any] = {"model": CHAT, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    if kind == "response_format":
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    else:
        body["tools"] = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
        body["tool_choice"] = "required"
    return body


def percentiles(times: list[float]) -> str:
    """p50 / p99 / max in ms."""
    ordered = sorted(times)
    p99 = ordered[max(0, int(len(ordered) * 0.99) - 1)]
    return f"{statistics.median(ordered) * 1000:.0f} / {p99 * 1000:.0f} / {ordered[-1] * 1000:.0f}"


def main(argv: list[str] | None = None) -> None:
    """Start the stack, attack for --seconds while probing, print the tables."""
    parser = argparse.ArgumentParser(prog="python -m bench.hostile_schemas", description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the hostile clients send")
    parser.add_argument("--clients", type=int, default=2, help="hostile clients")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="bench-hostile-schemas-"))
    chat = model_factory.build_tiny_gpt2(root / "gpt2", chat_template=model_factory.CHAT_TEMPLATE)
    with Stack.started() as stack:
        stack.manage("register_model", CHAT, "--source", str(chat), "--task", "text-generation")
        stack.manage("register_model", EMBED, "--source", str(model_factory.minilm_path()), "--task",
                     "feature-extraction", "--pooling", "mean")
        stack.create_token("all")  # wait_ready reads the models with it
        stack.create_token("hostile")
        stack.create_token("tenant")
        stack.start_worker()
        stack.start_worker()
        stack.start_web()
        stack.wait_ready([CHAT, EMBED])
        until = time.monotonic() + args.seconds
        answers: Counter[tuple[str, str, int]] = Counter()
        names = itertools.count()

        def hostile() -> None:
            while time.monotonic() < until:
                for kind in ("response_format", "tools"):
                    for name, schema in schemas(f"p{next(names)}").items():
                        status = http_json("POST", f"{stack.url}/v1/chat/completions", attack_body(kind, schema),
                                           token=stack.tokens["hostile"], timeout=120)[0]
                        answers[(kind, name, status)] += 1

        threads = [threading.Thread(target=hostile, daemon=True) for _ in range(args.clients)]
        for thread in threads:
            thread.start()
        embeddings: list[float] = []
        health: list[float] = []
        refused = {"embeddings": 0, "health": 0}
        while any(thread.is_alive() for thread in threads):
            started = time.perf_counter()
            status = http_json("POST", f"{stack.url}/models/{EMBED}", {"inputs": "a short sentence"},
                               token=stack.tokens["tenant"], timeout=60)[0]
            embeddings.append(time.perf_counter() - started)
            refused["embeddings"] += status != 200
            started = time.perf_counter()
            status = http_json("GET", f"{stack.url}/health", timeout=60)[0]
            health.append(time.perf_counter() - started)
            refused["health"] += status != 200
            time.sleep(0.05)
        print(f"\n## {args.clients} hostile clients for {args.seconds:g} s\n")
        print("| field | schema | answers |\n|---|---|---|")
        for (kind, name) in sorted({(k, n) for k, n, _ in answers}):
            statuses = ", ".join(f"{status} x {count}" for (k, n, status), count in sorted(answers.items())
                                 if (k, n) == (kind, name))
            print(f"| {kind} | {name} | {statuses} |")
        print("\n| probe (another tenant) | probes | not 200 | p50 / p99 / max ms |\n|---|---:|---:|---|")
        print(f"| POST /models/{EMBED} | {len(embeddings)} | {refused['embeddings']} | {percentiles(embeddings)} |")
        print(f"| GET /health | {len(health)} | {refused['health']} | {percentiles(health)} |", flush=True)


if __name__ == "__main__":
    main()
