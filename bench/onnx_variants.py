"""`python -m bench.onnx_variants`: ONNX Runtime ways to run MiniLM, one thread, CPU time per sentence.

Packed rows against length-sorted padded batches (the README's reason to keep the 4D mask
in the export), and the int8 copies' cosine to fp32 against their speed (the int8 table).
CPU time, not wall time, so that other processes on a shared machine matter less.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import corpus
from bench.ceiling import _quiet
from bench.ort_ceiling import _padded_vectors

ROOT = Path(__file__).resolve().parent.parent


def _rate(run: Any, sentences: list[str], batch: int) -> float:
    """Sentences per CPU second, batches of `batch` in corpus order."""
    started = time.process_time()
    for start in range(0, len(sentences), batch):
        run(sentences[start:start + batch])
    return len(sentences) / (time.process_time() - started)


def main(argv: list[str] | None = None) -> None:
    """Print both tables."""
    parser = argparse.ArgumentParser(prog="python -m bench.onnx_variants", description=__doc__)
    parser.add_argument("--corpus-size", type=int, default=300)
    parser.add_argument("--batches", default="8,20,32")
    args = parser.parse_args(argv)
    _quiet()
    import torch
    from transformers import AutoModel, AutoTokenizer

    from models_registry.inference import onnx_backend, onnx_export
    from tests.model_factory import minilm_path

    torch.set_num_threads(1)
    source = str(minilm_path())
    tokenizer, model = AutoTokenizer.from_pretrained(source), AutoModel.from_pretrained(source).eval()
    encoder, _ = onnx_backend.load_ort_encoder(model, tokenizer, 0, source=source, revision="",
                                               cache_dir=ROOT / "test-artifacts" / "onnx-cache", int8=False,
                                               int8_floor=0.0, threads=1)
    sentences = corpus.build_corpus(args.corpus_size)
    print("| batch | packed rows of 64 | packed rows of 128 | padded, sorted micro-batches of 8 |")
    print("|---:|---:|---:|---:|")
    for batch in (int(b) for b in args.batches.split(",")):
        def packed(texts: list[str], rows: int) -> Any:
            previous, onnx_backend.ROW_TOKENS = onnx_backend.ROW_TOKENS, rows
            try:
                return onnx_backend.mean_vectors(encoder, tokenizer, texts, 0)
            finally:
                onnx_backend.ROW_TOKENS = previous

        def padded(texts: list[str]) -> None:
            ordered = sorted(texts, key=len)
            for start in range(0, len(ordered), 8):
                _padded_vectors(encoder, tokenizer, ordered[start:start + 8])

        with torch.inference_mode():
            cells = [_rate(lambda t: packed(t, 64), sentences, batch), _rate(lambda t: packed(t, 128), sentences, batch),
                     _rate(padded, sentences, batch)]
        print(f"| {batch} | " + " | ".join(f"{c:.0f}" for c in cells) + " |")
    fp32 = onnx_backend.mean_vectors(encoder, tokenizer, sentences, 0)
    print("\n| int8 copy | min cosine to fp32 | median | sentences per CPU second (batches of 32) |")
    print("|---|---:|---:|---:|")
    print(f"| none (fp32) | 1 | 1 | {_rate(lambda t: onnx_backend.mean_vectors(encoder, tokenizer, t, 0), sentences, 32):.0f} |")
    for label, keep in (("every matrix product", ()), ("feed-forward outputs and first layer in float",
                                                       tuple(onnx_export.float_kept_nodes(encoder.path)))):
        name = "model-int8.onnx" if not keep else "model-int8-partial.onnx"
        int8 = onnx_backend.OrtEncoder(onnx_export.quantize_int8(encoder.path, encoder.path.parent / name, keep), 1)
        cosines = np.sum(fp32 * onnx_backend.mean_vectors(int8, tokenizer, sentences, 0), axis=1)
        rate = _rate(lambda t, e=int8: onnx_backend.mean_vectors(e, tokenizer, t, 0), sentences, 32)
        print(f"| {label} | {cosines.min():.4f} | {np.median(cosines):.4f} | {rate:.0f} |")


if __name__ == "__main__":
    main()
