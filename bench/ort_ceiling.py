"""The in-process ONNX Runtime fp32 ceiling: the product's own export, no server, in a spawned process.

Two ways over the corpus sorted by length in batches of 32: padded batches (what a plain
ONNX server does) and packed rows (what the worker does); the ceiling is the faster one.
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from bench.ceiling import _quiet
from bench.procstat import machine_busy_seconds

BATCH = 32


def _padded_vectors(encoder: Any, tokenizer: Any, texts: list[str]) -> np.ndarray:
    """Mean-pooled, normalised vectors of one padded batch through the packed graph (a 4D mask of the padding)."""
    import torch

    encoded = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
    mask2d = encoded["attention_mask"]
    rows, width = mask2d.shape
    keys = mask2d[:, None, None, :].bool().expand(rows, 1, width, width)
    mask = torch.zeros(keys.shape).masked_fill_(~keys, torch.finfo(torch.float32).min)
    inputs = {"input_ids": encoded["input_ids"], "position_ids": torch.arange(width).expand(rows, width),
              "attention_mask": mask, "token_type_ids": encoded["token_type_ids"]}
    hidden = encoder(inputs)
    weights = mask2d.unsqueeze(-1).float()
    pooled = (hidden * weights).sum(1) / weights.sum(1)
    return torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()


def _measure(model_path: str, cache_dir: str, sentences: list[str], threads: int, latency_threads: int,
             repeats: int, latency_calls: int) -> dict[str, Any]:
    """Body of the ceiling process: sentences/s padded and packed, one-sentence latency, agreement vectors."""
    _quiet()
    import torch
    from transformers import AutoModel, AutoTokenizer

    from models_registry.inference import onnx_backend
    from models_registry.inference.packed_forward import packed_position_offset

    torch.set_num_threads(threads)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModel.from_pretrained(model_path).eval()
    offset = packed_position_offset(model, tokenizer)
    if offset is None:
        raise RuntimeError("packed forwards do not reproduce the model: no ONNX export")
    encoder, _ = onnx_backend.load_ort_encoder(model, tokenizer, offset, source=model_path, revision="",
                                               cache_dir=Path(cache_dir), int8=False, int8_floor=0.0, threads=threads)
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    ordered = [sentences[i] for i in order]
    batches = [ordered[s:s + BATCH] for s in range(0, len(ordered), BATCH)]
    runs = {"padded": lambda b: _padded_vectors(encoder, tokenizer, b),
            "packed": lambda b: onnx_backend.mean_vectors(encoder, tokenizer, b, offset)}
    rates: dict[str, list[float]] = {name: [] for name in runs}
    vectors: dict[str, np.ndarray] = {}
    own_cpu, machine, wall = time.process_time(), machine_busy_seconds(), time.perf_counter()
    with torch.inference_mode():
        runs["packed"](ordered[:BATCH])  # warm-up
        for _ in range(repeats):
            for name, run in runs.items():
                t0 = time.perf_counter()
                out = np.concatenate([run(b) for b in batches])
                rates[name].append(len(ordered) / (time.perf_counter() - t0))
                vectors[name] = out
    own_cpu, machine, wall = time.process_time() - own_cpu, machine_busy_seconds() - machine, time.perf_counter() - wall
    single = onnx_backend.OrtEncoder(encoder.path, latency_threads)
    latencies = []
    with torch.inference_mode():
        for i in range(latency_calls):
            t0 = time.perf_counter()
            onnx_backend.mean_vectors(single, tokenizer, [sentences[i % len(sentences)]], offset)
            latencies.append((time.perf_counter() - t0) * 1000)
    best = max(rates, key=lambda name: max(rates[name]))
    restored = np.zeros_like(vectors[best])
    restored[order] = vectors[best]
    return {
        "threads": threads, "batch": BATCH,
        "per_way": {name: round(max(v), 1) for name, v in rates.items()},
        "best_way": best, "sentences_per_s": round(max(rates[best]), 1),
        "one_sentence_ms_p50": round(statistics.median(latencies), 2), "latency_threads": latency_threads,
        "other_load_cores": round(max(0.0, machine - own_cpu) / wall, 2),
        "vectors": restored,
    }


def measure_ort_ceiling(model_path: str, cache_dir: Path, sentences: list[str], threads: int = 2,
                        latency_threads: int = 1, repeats: int = 2, latency_calls: int = 50) -> dict[str, Any]:
    """Run the ONNX Runtime ceiling in a fresh spawned process; its results (vectors: array in corpus order)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(_measure, model_path, str(cache_dir), sentences, threads, latency_threads, repeats,
                           latency_calls).result()
