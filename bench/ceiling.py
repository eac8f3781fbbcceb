"""The in-process ceiling: the transformers pipeline on the corpus, plus reference vectors.

Runs in its own (spawned) process so that the load client never holds torch or its threads.
"""

from __future__ import annotations

import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

import numpy as np

from bench.procstat import machine_busy_seconds


def _quiet() -> None:
    """Offline, no progress bars, no tokenizer thread pool."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _pool(pipe: Any, texts: list[str], token_outputs: list[Any]) -> np.ndarray:
    """Mean-pool each item's token embeddings over its real tokens, then L2-normalise."""
    import torch

    lengths = [len(ids) for ids in pipe.tokenizer(texts, truncation=True)["input_ids"]]
    pooled = torch.stack([out[0, :n].mean(dim=0) for out, n in zip(token_outputs, lengths)])
    return torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()


def _reference(pipe: Any, sentences: list[str], batch: int = 64) -> np.ndarray:
    """Normalised mean-pooled vectors straight from the model (attention-mask pooling)."""
    import torch

    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    vectors = np.zeros((len(sentences), pipe.model.config.hidden_size), dtype=np.float32)
    with torch.inference_mode():
        for start in range(0, len(order), batch):
            idx = order[start:start + batch]
            enc = pipe.tokenizer([sentences[i] for i in idx], padding=True, truncation=True, return_tensors="pt")
            hidden = pipe.model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            vectors[idx] = torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()
    return vectors


def _measure(model_path: str, sentences: list[str], batch_sizes: list[int], threads: int,
             repeats: int, latency_calls: int) -> dict[str, Any]:
    """Body of the ceiling process: throughput per batch size, one-sentence latency, references."""
    _quiet()
    import torch
    import transformers
    from transformers import pipeline

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(threads)
    started = time.perf_counter()
    pipe = pipeline("feature-extraction", model=model_path, device="cpu")
    pipe.model.eval()
    load_s = time.perf_counter() - started
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    ordered = [sentences[i] for i in order]
    own_cpu, machine = time.process_time(), machine_busy_seconds()
    wall = time.perf_counter()
    with torch.inference_mode():
        pipe(ordered[:64], batch_size=32, return_tensors=True)  # warm-up
        per_batch: dict[int, list[float]] = {b: [] for b in batch_sizes}
        for _ in range(repeats):
            for batch in batch_sizes:
                t0 = time.perf_counter()
                texts = sorted(sentences, key=len)
                outputs = pipe(texts, batch_size=batch, return_tensors=True)
                vectors = _pool(pipe, texts, outputs)
                per_batch[batch].append(len(texts) / (time.perf_counter() - t0))
        own_cpu, machine = time.process_time() - own_cpu, machine_busy_seconds() - machine
        wall = time.perf_counter() - wall
        done = len(sentences) * repeats * len(batch_sizes) + 64
        latencies: list[float] = []
        for i in range(latency_calls):
            text = sentences[i % len(sentences)]
            t0 = time.perf_counter()
            out = pipe(text, return_tensors=True)
            _pool(pipe, [text], [out])
            latencies.append((time.perf_counter() - t0) * 1000)
        best = max(batch_sizes, key=lambda b: max(per_batch[b]))
        torch.set_num_threads(1)  # for comparison: one thread cannot spin-wait on a busy core
        t0 = time.perf_counter()
        _pool(pipe, ordered, pipe(ordered, batch_size=best, return_tensors=True))
        one_thread = len(ordered) / (time.perf_counter() - t0)
        torch.set_num_threads(threads)
    reference = _reference(pipe, sentences)
    agreement = float(np.min(np.sum(vectors * reference[order], axis=1)))
    return {
        "threads": threads,
        "load_s": round(load_s, 2),
        "per_batch_size": {str(b): round(max(v), 1) for b, v in per_batch.items()},
        "best_batch_size": best,
        "sentences_per_s": round(max(per_batch[best]), 1),
        "one_sentence_ms_p50": round(statistics.median(latencies), 2),
        "one_sentence_ms_min": round(min(latencies), 2),
        "latency_calls": latency_calls,
        "cpu_ms_per_sentence": round(1000 * own_cpu / done, 2),
        "other_load_cores": round(max(0.0, machine - own_cpu) / wall, 2),
        "one_thread_sentences_per_s": round(one_thread, 1),
        "pipeline_vs_reference_min_cosine": round(agreement, 6),
        "reference": reference,
    }


def measure_ceiling(model_path: str, sentences: list[str], batch_sizes: tuple[int, ...] = (16, 32, 64),
                    threads: int = 2, repeats: int = 2, latency_calls: int = 50) -> dict[str, Any]:
    """Run the ceiling measurement in a fresh spawned process; its results (reference: array)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(_measure, model_path, sentences, list(batch_sizes), threads, repeats,
                           latency_calls).result()
