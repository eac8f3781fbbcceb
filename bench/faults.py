"""`python -m bench.faults`: faults and hostile clients, measured on one stack with a private Redis.

- restart: 16 clients post for the whole run; Redis is shut down (with its data, as
  `redis-cli shutdown save` does, or emptied) and started again; answers in the 60 s after
  it answers again, by status, the first second apart;
- shared id: 10 and 300 concurrent requests that all send `X-Request-Id: retry-42`
  (the task's max_queue_size is 64);
- overload: the latency of a burst of 2,000 requests against a full queue (all answered
  503 overloaded at once) beside a burst of 2,000 `GET /health`, at the same concurrency,
  while the queue is kept full; both through bench.http_client's raw keep-alive connections
  (httpx's own CPU used to dominate these latencies on a 2-core machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

MODEL = "emb"
QUEUE = 64
LONG = " ".join(["overload"] * 200)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="restart,shared-id,overload", help="which measurements, comma-separated")
    parser.add_argument("--clients", type=int, default=16, help="clients posting through the Redis restart")
    parser.add_argument("--after-s", type=float, default=60.0, help="seconds measured after Redis returns")
    parser.add_argument("--burst", type=int, default=2000, help="requests in each burst")
    parser.add_argument("--concurrency", type=int, default=200, help="connections a burst uses")
    parser.add_argument("--root", help="run the product from this checkout instead (e.g. a git archive of a baseline)")
    args = parser.parse_args(argv)
    args.only = [part.strip() for part in args.only.split(",") if part.strip()]
    return args


def start_stack(root: str | None = None) -> Any:
    """The demo model with a queue of QUEUE items (timeout 60 s), one worker, one web server, a private Redis.

    root: another checkout of the product to run (before/after figures with this client).
    """
    from tests import stack as stack_module
    from tests.model_factory import minilm_path
    from tests.stack import Stack

    if root:
        stack_module.ROOT = Path(root)  # the processes' working directory, so their code
    stack = Stack.create(own_redis=True)
    try:
        stack.manage("register_model", MODEL, "--source", str(minilm_path()), "--task", "feature-extraction",
                     "--pooling", "mean", "--normalize", "--max-batch-size", "8", "--max-queue-size", str(QUEUE),
                     "--timeout", "60")
        stack.create_token("all")
        stack.start_worker()
        stack.start_web()
        stack.wait_ready([MODEL])
    except BaseException:
        print(stack.logs())
        stack.stop()
        raise
    return stack


async def post(client: httpx.AsyncClient, url: str, body: Any, headers: dict[str, str]) -> tuple[int, str, float]:
    """(status, error_type or '' or the transport error, seconds)."""
    started = time.perf_counter()
    try:
        response = await client.post(url, json=body, headers=headers)
        kind = response.json().get("error_type", "") if response.status_code != 200 else ""
        return response.status_code, kind, time.perf_counter() - started
    except httpx.HTTPError as error:
        return 0, type(error).__name__, time.perf_counter() - started


def restart(stack: Any, args: argparse.Namespace, empty: bool) -> dict[str, Any]:
    """Clients run across a Redis restart; what they got once it answered again."""
    import redis

    url, headers = f"{stack.url}/models/{MODEL}", {"Authorization": f"Bearer {stack.tokens['all']}"}
    answers: list[tuple[float, int, str]] = []  # (answered at, status, kind)
    back: list[float] = []

    async def run() -> None:
        stop_at = [float("inf")]
        async with httpx.AsyncClient(timeout=40) as client:
            async def one(n: int) -> None:
                i = 0
                while time.monotonic() < stop_at[0]:
                    status, kind, _ = await post(client, url, {"inputs": f"{n} {i} after a restart"}, headers)
                    answers.append((time.monotonic(), status, kind))
                    i += 1

            async def fault() -> None:
                await asyncio.sleep(5)
                if empty:
                    stack.redis.stop()
                    (stack.workdir / "dump.rdb").unlink(missing_ok=True)
                else:
                    try:
                        redis.Redis(port=stack.redis.port).shutdown(save=True)
                    except redis.ConnectionError:
                        pass
                    stack.redis.process.wait(10)
                await asyncio.to_thread(stack.redis.restart)
                back.append(time.monotonic())
                stop_at[0] = back[0] + args.after_s

            await asyncio.gather(fault(), *(one(n) for n in range(args.clients)))

    asyncio.run(run())
    after = [(t - back[0], s, k) for t, s, k in answers if t >= back[0]]
    failed = Counter(f"{s} {k}".strip() for _, s, k in after if s != 200)
    return {
        "scenario": "restart, empty" if empty else "restart with data",
        "answers": len(after), "ok": sum(1 for _, s, _ in after if s == 200),
        "failed": sum(failed.values()),
        "failed_after_1s": sum(1 for t, s, _ in after if s != 200 and t > 1.0),
        "kinds": dict(failed),
    }


def shared_id(stack: Any, count: int) -> dict[str, Any]:
    """count concurrent requests that all send X-Request-Id: retry-42."""
    url = f"{stack.url}/models/{MODEL}"
    headers = {"Authorization": f"Bearer {stack.tokens['all']}", "X-Request-Id": "retry-42"}

    async def run() -> list[tuple[int, str, float]]:
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=count)) as client:
            return await asyncio.gather(*(post(client, url, {"inputs": f"{i} {LONG}"}, headers) for i in range(count)))

    answers = asyncio.run(run())
    return {"requests": count, "statuses": dict(Counter(f"{s} {k}".strip() for s, k, _ in answers)),
            "slowest_s": round(max(t for _, _, t in answers), 2)}


async def _raw_burst(base: str, raws: list[bytes], concurrency: int) -> list[tuple[int, str, float]]:
    """Send raws over `concurrency` keep-alive connections (bench.http_client: the client costs little):
    (status, error_type, seconds) each."""
    from bench.http_client import Client, ConnectionBroken

    todo = list(enumerate(raws))
    answers: list[tuple[int, str, float]] = []

    async def connection() -> None:
        client = Client(base)
        try:
            while todo:
                _, raw = todo.pop()
                started = time.perf_counter()
                try:
                    status, _, body = await client.request(raw)
                    kind = json.loads(body).get("error_type", "") if status != 200 else ""
                except (OSError, ConnectionBroken, ValueError) as error:
                    status, kind = 0, type(error).__name__
                    client.close()
                answers.append((status, kind, time.perf_counter() - started))
        finally:
            client.close()

    await asyncio.gather(*(connection() for _ in range(concurrency)))
    return answers


def bursts(stack: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    """p50/p99 of a burst against a full queue, and of a /health burst of the same size (same server, same client)."""
    from bench.http_client import build_request

    url = f"{stack.url}/models/{MODEL}"
    headers = {"Authorization": f"Bearer {stack.tokens['all']}"}
    posts = [build_request("POST", stack.url, f"/models/{MODEL}", json.dumps({"inputs": f"{i} short"}).encode(),
                           stack.tokens["all"]) for i in range(args.burst)]
    gets = [build_request("GET", stack.url, "/health") for _ in range(args.burst)]

    async def run() -> tuple[list[tuple[int, str, float]], list[tuple[int, str, float]]]:
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=32)) as client:
            keep_full = True

            async def filler() -> None:  # 16 x 8 long inputs: always more than the queue takes
                while keep_full:
                    await post(client, url, {"inputs": [f"{i} {LONG}" for i in range(8)]}, headers)

            fillers = [asyncio.ensure_future(filler()) for _ in range(16)]
            await asyncio.sleep(3)
            overloaded = await _raw_burst(stack.url, posts, args.concurrency)
            healthy = await _raw_burst(stack.url, gets, args.concurrency)  # the fillers still run: same server load
            keep_full = False
            await asyncio.gather(*fillers)
            return overloaded, healthy

    overloaded, healthy = asyncio.run(run())
    rows = []
    for name, answers in (("burst on a full queue", overloaded), ("GET /health burst", healthy)):
        # The refusals' latency: the few admitted when a place opened wait for compute instead.
        times = sorted(t for s, _, t in answers if s in (503, 200) and (s == 503 or name.startswith("GET")))
        rows.append({"burst": name, "requests": len(answers),
                     "statuses": dict(Counter(f"{s} {k}".strip() for s, k, _ in answers)),
                     "p50_ms": round(statistics.median(times) * 1000, 1),
                     "p99_ms": round(times[int(len(times) * 0.99) - 1] * 1000, 1)})
    return rows


def main(argv: list[str] | None = None) -> None:
    """Run the measurements and print their tables."""
    args = parse_args(argv)
    stack = start_stack(args.root)
    try:
        if "restart" in args.only:
            print(f"\n## Redis restart: {args.clients} clients, answers in the {args.after_s:g} s after it answers\n")
            print("| scenario | answers | 200 | failed | failed after 1 s | failures |\n|---|---|---|---|---|---|")
            for empty in (False, True):
                row = restart(stack, args, empty)
                print(f"| {row['scenario']} | {row['answers']} | {row['ok']} | {row['failed']} | "
                      f"{row['failed_after_1s']} | {row['kinds'] or '-'} |", flush=True)
        if "shared-id" in args.only:
            print(f"\n## One X-Request-Id for every request (max_queue_size {QUEUE})\n")
            print("| requests | answers | slowest s |\n|---|---|---|")
            for count in (10, 300):
                row = shared_id(stack, count)
                print(f"| {row['requests']} | {row['statuses']} | {row['slowest_s']} |", flush=True)
        if "overload" in args.only:
            print(f"\n## Bursts of {args.burst} at concurrency {args.concurrency}\n")
            print("Latency of the 503 answers (of the 200s for /health).\n")
            print("| burst | answers | p50 ms | p99 ms |\n|---|---|---|---|")
            for row in bursts(stack, args):
                print(f"| {row['burst']} | {row['statuses']} | {row['p50_ms']} | {row['p99_ms']} |", flush=True)
    finally:
        stack.stop()


if __name__ == "__main__":
    main()
