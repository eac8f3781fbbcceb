"""Shared pieces of the integration tests: inputs, a concurrent client, reference vectors."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from tests import model_factory

WORDS = ("river model server batch queue token vector worker request answer django redis "
         "python music garden yellow quickly under across window mountain paper story").split()


def sentences(count: int, seed: int = 7) -> list[str]:
    """Distinct English-ish sentences of 3 to 40 words."""
    rng = random.Random(seed)
    return [f"{i} " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 40))) for i in range(count)]


@dataclass
class Answer:
    """One HTTP answer as the load client saw it."""

    index: int
    status: int
    body: Any
    headers: dict[str, str]
    seconds: float


async def post_many(url: str, token: str, texts: list[str], concurrency: int, timeout_s: float = 120,
                    on_answer: Any = None) -> list[Answer]:
    """POST {"inputs": text} for every text, at most concurrency at a time; every answer."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    semaphore = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=timeout_s) as client:
        async def one(index: int, text: str) -> Answer:
            async with semaphore:
                started = time.perf_counter()
                try:
                    response = await client.post(url, json={"inputs": text},
                                                 headers={"Authorization": f"Bearer {token}"})
                    answer = Answer(index, response.status_code, response.json(), dict(response.headers),
                                    time.perf_counter() - started)
                except httpx.HTTPError as error:
                    answer = Answer(index, 0, repr(error), {}, time.perf_counter() - started)
                if on_answer is not None:
                    on_answer(answer)
                return answer

        return await asyncio.gather(*(one(i, t) for i, t in enumerate(texts)))


class MiniLMReference:
    """In-process MiniLM embeddings (mean pooling, normalized, 256 tokens: its sentence_bert_config.json's
    max_seq_length, as sentence-transformers truncates): what the server must return."""

    def __init__(self) -> None:
        from transformers import AutoModel, AutoTokenizer

        path = str(model_factory.minilm_path())
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).eval()

    def __call__(self, texts: list[str]) -> np.ndarray:
        import torch

        out = []
        for start in range(0, len(texts), 64):
            enc = self.tokenizer(texts[start:start + 64], padding=True, truncation=True, max_length=256,
                                 return_tensors="pt")
            with torch.inference_mode():
                hidden = self.model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).float()
            pooled = (hidden * mask).sum(1) / mask.sum(1)
            out.append(torch.nn.functional.normalize(pooled, dim=1).numpy())
        return np.concatenate(out)


def wrong_answers(answers: list[Answer], texts: list[str], reference: MiniLMReference) -> list[int]:
    """Indices of 200 answers whose vector is not their own input's (cosine <= 0.9999)."""
    ok = [a for a in answers if a.status == 200]
    if not ok:
        return []
    got = np.array([a.body for a in ok], dtype=np.float32)
    expected = reference([texts[a.index] for a in ok])
    cosines = (got * expected).sum(axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(expected, axis=1))
    return [a.index for a, c in zip(ok, cosines) if c <= 0.9999]
