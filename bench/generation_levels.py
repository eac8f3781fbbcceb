"""The issue-34 levels of `make bench-generation`, on the product's continuous-batching server.

- shared system prompt: 8 closed-loop streams whose prompts start with the same 1,000-token
  system prompt, against the same lengths with a different head each (time to first token);
- whole answers: six non-streamed 500-token HF requests sent 50 ms apart, then a 4-token one:
  its latency against their median (also on the static-batching server);
- the fairness flood: token A streams two /v1/completions of 8 prompts x n=8 (128 sequences),
  token B asks an 8-token chat beside them: B's latency, every answer whole (three runs);
- hostile: 16 chats of 1 MB (one with n=8), and a batch job of 64 generation lines.
Meanwhile an encoder on the same worker is probed every 0.2 s: its longest wait per level.
"""

from __future__ import annotations

import asyncio
import io
import json
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

SYSTEM_TOKENS = 1000
PROBE_EVERY_S = 0.2
FLOOD_PROMPTS, FLOOD_N = 8, 8
WORDS = ("the cat dog sees a book about history city of Paris once upon time blue sky reads lazy every question "
         "quickly likes and").split()


class EncoderProbe:
    """An embedding request to the encoder beside the generation model, every PROBE_EVERY_S: the waits seen."""

    def __init__(self, url: str, model: str, headers: dict[str, str]) -> None:
        self.url, self.model, self.headers = url, model, headers
        self.samples: list[tuple[float, float, int]] = []  # (sent, seconds, status)
        self.task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """Probe until cancelled."""
        async with httpx.AsyncClient(timeout=60) as client:
            while True:
                sent = time.perf_counter()
                response = await client.post(f"{self.url}/models/{self.model}", headers=self.headers,
                                             json={"inputs": "Is the encoder still answering?"})
                self.samples.append((sent, time.perf_counter() - sent, response.status_code))
                await asyncio.sleep(PROBE_EVERY_S)

    async def during(self, work: Awaitable[Any]) -> tuple[Any, dict[str, Any]]:
        """work's result, and the probe's longest wait (and failures) while it ran."""
        started = time.perf_counter()
        self.task = self.task or asyncio.ensure_future(self.run())
        result = await work
        await asyncio.sleep(PROBE_EVERY_S * 2)  # the probe sent last has its answer
        seen = [s for s in self.samples if s[0] >= started]
        return result, {"probe_max_ms": round(1000 * max((s[1] for s in seen), default=0.0), 1),
                        "probe_failed": sum(1 for s in seen if s[2] != 200), "probes": len(seen)}

    async def stop(self) -> None:
        """Stop probing."""
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


def words(tokenizer: Any, tokens: int, seed: int) -> str:
    """A text of about tokens tokens (the bench model's tokenizer), from seed."""
    rng = random.Random(seed)
    text = ""
    while len(tokenizer(text)["input_ids"]) < tokens:
        text += " ".join(rng.choice(WORDS) for _ in range(40)) + ". "
    ids = tokenizer(text)["input_ids"][:tokens]
    return tokenizer.decode(ids)


async def shared_prompt(server: Any, args: Any, tokenizer: Any, level: Callable[..., Awaitable[dict[str, Any]]]
                        ) -> dict[str, Any]:
    """Time to first token of 8 streams whose prompts share a 1,000-token head, and of the same lengths unshared."""
    head = words(tokenizer, SYSTEM_TOKENS, 0) + "\n"
    questions = ["The cat sees", "A dog likes", "Paris is", "Once upon a time"]
    tokens = 8  # 1,000 + the question + 8 within the model's 1,024 positions
    shared = [(head + questions[n % 4], tokens) for n in range(args.max_requests)]
    # The same lengths, each with a head of its own: from its first token nothing is shared.
    unshared = [(words(tokenizer, SYSTEM_TOKENS, 1000 + n) + "\n" + questions[n % 4], tokens)
                for n in range(min(args.max_requests, 60))]
    with_head = await level(server, 8, args, plan=shared, probe_every_s=None)
    without = await level(server, 8, args, plan=unshared, probe_every_s=None)
    ratio = None
    if with_head["ttft_p50_ms"] and without["ttft_p50_ms"]:
        ratio = round(with_head["ttft_p50_ms"] / without["ttft_p50_ms"], 3)
    return {"shared": with_head, "unshared": without, "ratio": ratio}


async def whole_answers(url: str, model: str, headers: dict[str, str]) -> dict[str, Any]:
    """Six non-streamed 500-token requests 50 ms apart, then a 4-token one: its latency against their median."""
    async with httpx.AsyncClient(timeout=900) as client:

        async def ask(prompt: str, tokens: int, delay: float) -> float:
            await asyncio.sleep(delay)
            started = time.perf_counter()
            response = await client.post(f"{url}/models/{model}", headers=headers, json={
                "inputs": prompt, "parameters": {"max_new_tokens": tokens, "do_sample": False}})
            if response.status_code != 200:
                raise RuntimeError(f"{model}: {response.status_code} {response.text[:200]}")
            return time.perf_counter() - started

        long = [asyncio.ensure_future(ask(f"Once upon a time {n}", 500, 0.05 * n)) for n in range(6)]
        short = await ask("Paris is", 4, 0.05 * 6)
        longs = await asyncio.gather(*long)
    median = statistics.median(longs)
    return {"short_ms": round(1000 * short, 1), "long_median_ms": round(1000 * median, 1),
            "ratio": round(short / median, 3)}


async def flood(url: str, model: str, greedy: dict[str, str], modest: dict[str, str], tokens: int) -> dict[str, Any]:
    """Token A's 128 streamed sequences and token B's 8-token chat beside them: B's latency, answers lost."""
    started_streaming = asyncio.Event()

    async def stream_a(client: httpx.AsyncClient) -> tuple[int, int]:
        body = {"model": model, "prompt": ["hello"] * FLOOD_PROMPTS, "n": FLOOD_N, "max_tokens": tokens,
                "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
        ended: set[int] = set()
        async with client.stream("POST", f"{url}/v1/completions", json=body, headers=greedy) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    started_streaming.set()
                    for choice in json.loads(line[6:]).get("choices") or []:
                        if choice.get("finish_reason"):
                            ended.add(choice["index"])
        return response.status_code, FLOOD_PROMPTS * FLOOD_N - len(ended)

    async with httpx.AsyncClient(timeout=1800) as client:
        floods = [asyncio.ensure_future(stream_a(client)) for _ in range(2)]
        try:
            await asyncio.wait_for(started_streaming.wait(), 120)
        except TimeoutError:
            pass
        sent = time.perf_counter()
        answer = await client.post(f"{url}/v1/chat/completions", headers=modest, json={
            "model": model, "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "user", "content": "The cat sees"}]})
        modest_s = time.perf_counter() - sent
        results = await asyncio.gather(*floods, return_exceptions=True)
    statuses = [r[0] if isinstance(r, tuple) else repr(r)[:80] for r in results]
    lost = sum(r[1] if isinstance(r, tuple) else FLOOD_PROMPTS * FLOOD_N for r in results)
    lost += sum(1 for r in results if isinstance(r, tuple) and r[0] != 200) + (answer.status_code != 200)
    return {"b_ms": round(1000 * modest_s, 1), "b_status": answer.status_code, "a_statuses": statuses,
            "lost": lost}


async def megabyte_chats(url: str, model: str, headers: dict[str, str]) -> dict[str, Any]:
    """16 chats of about 1 MB (one with n=8): each must be refused at once."""
    content = "word " * 200_000
    async with httpx.AsyncClient(timeout=300) as client:
        answers = await asyncio.gather(*(client.post(f"{url}/v1/chat/completions", headers=headers, json={
            "model": model, "n": 8 if n == 0 else 1, "max_tokens": 8,
            "messages": [{"role": "user", "content": content}]}) for n in range(16)))
    return {"statuses": sorted({a.status_code for a in answers})}


async def generation_job(url: str, model: str, headers: dict[str, str], lines: int = 64) -> dict[str, Any]:
    """A batch job of generation lines (the model's default length), until it completes."""
    rows = b"".join(json.dumps({"custom_id": f"line-{n}", "method": "POST", "url": f"/models/{model}",
                                "body": {"inputs": f"Once upon a time {n}"}}).encode() + b"\n" for n in range(lines))
    async with httpx.AsyncClient(base_url=url + "/v1", headers=headers, timeout=120) as client:
        uploaded = await client.post("/files", files={"file": ("job.jsonl", io.BytesIO(rows))},
                                     data={"purpose": "batch"})
        uploaded.raise_for_status()
        started = time.perf_counter()
        batch = await client.post("/batches", json={"input_file_id": uploaded.json()["id"],
                                                    "endpoint": f"/models/{model}", "completion_window": "24h"})
        batch.raise_for_status()
        while True:
            state = (await client.get(f"/batches/{batch.json()['id']}")).json()
            if state["status"] in ("completed", "failed", "cancelled", "expired"):
                break
            await asyncio.sleep(0.5)
    return {"status": state["status"], "seconds": round(time.perf_counter() - started, 1),
            "failed_lines": state["request_counts"]["failed"]}
