"""`python -m bench.hostile_schemas`: issue 50's hostile grammars for a bounded time, and what others wait meanwhile.

Two workers serve a tiny chat model and the demo embedder. Two hostile clients (processes of their own) send, in
turn and without pause, issue 50's schemas (a 100,000-value enum, 20,000 properties, an
anyOf of 5,000 objects, a $ref loop, a required self-recursive object, each with a fresh
property name so that no cache helps) as `response_format` and as a forced tool's
parameters, for --seconds. Meanwhile another tenant's embeddings and `/health` are probed in
turn. Printed: each attack's answers by status, and the probes' p50, p99 and max.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from tests import model_factory
from tests.stack import Stack, http_json

CHAT, EMBED = "chat", "minilm"
FRESH = "__fresh__"  # replaced in each request's bytes by a new property name


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


def hostile_client(url: str, token: str, seconds: float, client: int, out: Any) -> None:
    """Send every attack in turn for seconds, each with a fresh name (in a process of its own: its JSON
    encoding must not hold the probes' interpreter); put its Counter of (field, schema, status) on out."""
    bodies = {(kind, name): json.dumps(attack_body(kind, schema)).encode()
              for kind in ("response_format", "tools") for name, schema in schemas(FRESH).items()}
    answers: Counter[tuple[str, str, int]] = Counter()
    until, sent = time.monotonic() + seconds, 0
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    with httpx.Client(timeout=120) as http:
        while time.monotonic() < until:
            for (kind, name), raw in bodies.items():
                sent += 1
                body = raw.replace(FRESH.encode(), f"c{client}n{sent}".encode())
                answers[(kind, name, http.post(f"{url}/v1/chat/completions", content=body, headers=headers)
                         .status_code)] += 1
    out.put(answers)


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
        results: Any = multiprocessing.Queue()
        clients = [multiprocessing.Process(target=hostile_client, daemon=True,
                                           args=(stack.url, stack.tokens["hostile"], args.seconds, n, results))
                   for n in range(args.clients)]
        for client in clients:
            client.start()
        embeddings: list[float] = []
        health: list[float] = []
        refused = {"embeddings": 0, "health": 0}
        answers: Counter[tuple[str, str, int]] = Counter()
        done = 0
        while done < len(clients):
            while not results.empty():
                answers += results.get()
                done += 1
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
        for client in clients:
            client.join(10)
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
