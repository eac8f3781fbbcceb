"""Web CPU of request validation: microseconds per call of the HF and OpenAI body checks, best of 5.

    python -m bench.validation
    PYTHONPATH=<another checkout> .venv/bin/python bench/validation.py   # the same bodies on other code

The bodies are the benchmark's (one sentence to feature-extraction) and a few others; a
rejected body pays for its explanation, an accepted one only for the check.
"""

from __future__ import annotations

import os
import timeit
from typing import Any

CASES: dict[str, tuple[bytes, str]] = {
    "feature-extraction, one sentence": ((b'{"inputs": "A sentence of about eleven words that the bench sends to '
                                         b'the model."}'), "feature-extraction"),
    "feature-extraction, 8 + keys": ((b'{"inputs": ["a b c", "d e f", "g h", "i j", "k", "l", "m", "n"], '
                                     b'"normalize": true, "parameters": {"truncate": true}}'), "feature-extraction"),
    "fill-mask with parameters": ((b'{"inputs": "Paris is the [MASK] of France.", "parameters": {"top_k": 3, '
                                  b'"targets": ["a", "b"]}}'), "fill-mask"),
    "rejected: top_k on embeddings": (b'{"inputs": "x", "parameters": {"top_k": 3}}', "feature-extraction"),
}
EMBEDDINGS = {"model": "all-minilm-l6-v2", "input": ["a sentence of eleven words or so, as the bench sends"] * 4,
              "encoding_format": "base64"}


def best_us(call: Any, number: int = 20_000) -> float:
    """Best of 5 runs, in microseconds per call."""
    return min(timeit.repeat(call, number=number, repeat=5)) / number * 1e6


def main() -> None:
    """Print one row per body."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hosting.settings")
    import django

    django.setup()
    from models_registry.api.openai.openai_routes import read_embedding_request
    from models_registry.api.hf.payloads import parse_body, read_request

    print("| body | us per call |\n|---|---:|")
    for name, (raw, task) in CASES.items():
        body = parse_body(raw, "application/json", 1 << 20)

        def call(body: Any = body, task: str = task) -> None:
            try:
                read_request(body, task, {}, 256)
            except Exception:  # noqa: BLE001, S110 - a rejected body is one of the cases measured
                pass

        call()
        print(f"| {name} | {best_us(call):.2f} |")
    print(f"| /v1/embeddings, 4 inputs | {best_us(lambda: read_embedding_request(EMBEDDINGS, 256)):.2f} |")


if __name__ == "__main__":
    main()
