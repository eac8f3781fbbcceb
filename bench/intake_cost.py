"""`python -m bench.intake_cost`: the worker's CPU per item, texts tokenized twice (before issue 26) against once.

In process, one torch thread, the tiny model (2 layers, hidden 32: the model costs little, so
what shows is the host work) or --minilm for the MiniLM-shaped one, the bench corpus in
lists of 32: intake's count plus the packed forward, pooling and the reply bytes. "twice"
counts each text with its own encode and lets the forward tokenize the plain strings again
(the path before issue 26); "once" encodes at intake in one batch call and the forward
reuses those ids (LoadedModel.count_inputs). Medians of --rounds, both paths alternated.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench.corpus import build_corpus


def main(argv: list[str] | None = None) -> int:
    """Both paths alternated; CPU ms per item of each."""
    parser = argparse.ArgumentParser(prog="python -m bench.intake_cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--minilm", action="store_true", help="the MiniLM-shaped model instead of the tiny one")
    args = parser.parse_args(argv)
    import torch

    from bench import gpu_ceiling
    from models_registry.core.batch_types import BatchPolicy
    from models_registry.inference.model_runner import PipelineRunner
    from models_registry.catalog.specs import ModelSpec, TaskSpec
    from tests import model_factory

    torch.set_num_threads(1)
    workdir = Path(tempfile.mkdtemp(prefix="bench-intake-"))
    source = gpu_ceiling.build_model(workdir / "m") if args.minilm else model_factory.build_feature_extractor(workdir / "m")
    task = TaskSpec(name="t", task="feature-extraction", parameters={}, pooling="mean", normalize=True,
                    policy=BatchPolicy(max_batch_size=64), timeout_s=60.0)
    spec = ModelSpec(name="m", source=str(source), revision="", device="cpu", dtype="float32", enabled=True,
                     tasks={"t": task}, default_task="t")
    runner = PipelineRunner(torchscript=False)
    loaded = runner.load(spec)
    texts = build_corpus(args.items)
    lists = [texts[i:i + 32] for i in range(0, len(texts), 32)]

    def twice() -> None:
        for batch in lists:
            [loaded.count_tokens(t) for t in batch]
            runner.run(loaded, task, batch, [{}] * len(batch))

    def once() -> None:
        for batch in lists:
            payloads, _costs = loaded.count_inputs("feature-extraction", batch)
            runner.run(loaded, task, payloads, [{}] * len(batch))

    times: dict[str, list[float]] = {"twice": [], "once": []}
    for _ in range(args.rounds):
        for name, run in (("twice", twice), ("once", once)):
            start = time.process_time()
            run()
            times[name].append(1000 * (time.process_time() - start) / len(texts))
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, value in medians.items():
        print(f"tokenized {name}: {value:.4f} ms CPU per item (intake count + tokenize + packed forward + pool)")
    print(f"once / twice: {medians['once'] / medians['twice']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
