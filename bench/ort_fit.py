"""`python -m bench.ort_fit`: how well the batch memory fit predicts the demo model's peaks on ONNX Runtime.

One stack, the demo model registered with backend onnxruntime, one worker with the memory
cap on (the default) and one thread. Client batches of every shape in a grid (items x
words, each within one packed forward) are sent one at a time, in a shuffled order, twice (each request is one batch),
and the fit the worker reports (GET /models/<name>: tasks[0].memory) is printed: its
samples, its largest relative error (the admin's "fit +-N%") and its coefficients.
"""

from __future__ import annotations

import argparse
import random
import time

from bench.stack_setup import stopped_on_failure

NAME = "demo-ort"
ITEMS = (1, 2, 4, 8, 16, 32)
WORDS = (8, 32, 96, 200)  # about 20, 50, 194 and 512 tokens (the model's limit)
# A batch over this many tokens runs as several forwards (inference.packing.MAX_TOKENS_PER_FORWARD), whose
# peak is the largest forward's, not the batch's: a shape the fit's features do not describe (see the notes).
MAX_TOKENS = 8192
TOKENS_PER_WORD = 2.6  # these made-up words ("w0x1y2") are about 2.6 MiniLM tokens each


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(prog="python -m bench.ort_fit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passes", type=int, default=2, help="times the grid is sent (shuffled each time)")
    parser.add_argument("--seed", type=int, default=7)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Send the grid, print the fit."""
    from tests.model_factory import minilm_path
    from tests.stack import Stack, http_json

    args = parse_args(argv)
    stack = Stack.create({"HOSTING_TORCH_THREADS": "1"})
    with stopped_on_failure(stack):
        stack.manage("register_model", NAME, "--source", str(minilm_path()), "--task", "feature-extraction",
                     "--pooling", "mean", "--normalize", "--backend", "onnxruntime", "--max-batch-size", "64",
                     "--timeout", "120")
        token = stack.create_token("all")
        stack.start_worker()
        url = stack.start_web()
        stack.wait_ready([NAME])
        rng = random.Random(args.seed)
        shapes = [(items, words) for items in ITEMS for words in WORDS
                  if items * min(512, words * TOKENS_PER_WORD) <= MAX_TOKENS]
        started = time.monotonic()
        sent = 0
        for round_ in range(args.passes):
            rng.shuffle(shapes)
            for items, words in shapes:
                inputs = [" ".join(f"w{round_}x{i}y{j}" for j in range(words)) for i in range(items)]
                status, _, body = http_json("POST", f"{url}/models/{NAME}", {"inputs": inputs}, token=token,
                                            timeout=120)
                if status != 200:
                    raise RuntimeError(f"{items} x {words} words answered {status}: {body}")
                sent += 1
        status, _, detail = http_json("GET", f"{url}/models/{NAME}", token=token)
        fit = detail["tasks"][0].get("memory") or {}
        print(f"{sent} batches in {time.monotonic() - started:.0f} s; backend {detail.get('active_backend')}")
        print("| samples | fit max relative error | cap tokens | coefficients (bytes per feature) |")
        print("|---:|---:|---:|---|")
        coefficients = ", ".join(f"{k} {v:.3g}" for k, v in (fit.get("coefficients") or {}).items())
        error = fit.get("max_relative_error")
        print(f"| {fit.get('samples')} | {'-' if error is None else f'{100 * error:.1f}%'} | "
              f"{fit.get('cap_tokens')} | {coefficients} |")
    stack.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
