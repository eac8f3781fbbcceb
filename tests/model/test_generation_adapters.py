"""LoRA adapters in the decode batch: each row generates what peft's merged adapter generates alone, whatever
adapters and base rows share its forwards, and a row never starts from a head another adapter computed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests import adapter_layouts, model_factory

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
from models_registry.catalog.specs import AdapterSpec
from models_registry.core.errors import Conflict
from models_registry.inference import cpu_packing
from models_registry.inference.adapter_cache import AdapterBudget, cache_for
from models_registry.inference.generation_batch import GenerationBatch, Row
from models_registry.inference.loading import load_pipeline

ADAPTERS = ("alpha", "beta", "gamma", "delta")
HEAD = "You are a helpful assistant who answers in short sentences about cats, dogs and the weather. "
PROMPTS = [HEAD + "The cat sees", "A dog likes the lazy dog and", HEAD + "Paris", "Once upon a time the blue sky"]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("decode-adapters")
    base = model_factory.build_tiny_gpt2(root / "gpt2", positions=256)
    built = {name: adapter_layouts.build_adapter(base, root / name, seed=n + 1, r=2 + n, task_type="CAUSAL_LM",
                                                 targets=adapter_layouts.GPT2_TARGETS)
             for n, name in enumerate(ADAPTERS)}
    built["head"] = adapter_layouts.build_adapter(base, root / "head", seed=9, task_type="CAUSAL_LM",
                                                  targets=("lm_head",))
    return {"base": base, **built}


@pytest.fixture(scope="module")
def pipe(dirs: dict[str, Path]) -> Any:
    loaded = load_pipeline("text-generation", str(dirs["base"]), None, "cpu", torch.float32)
    cpu_packing.pack(loaded.model)  # as a worker runs it: the hooks see the packed layers' outputs
    return loaded


def reference(dirs: dict[str, Path], name: str | None, prompt: str, tokens: int) -> list[int]:
    """generate()'s greedy tokens of peft's merged adapter (or the base) for one prompt."""
    from transformers import AutoTokenizer

    model = adapter_layouts.merged_model(dirs["base"], dirs[name], "CAUSAL_LM") if name \
        else adapter_layouts.base_model(dirs["base"], "CAUSAL_LM")
    ids = AutoTokenizer.from_pretrained(str(dirs["base"]))(prompt, return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                         pad_token_id=model.config.eos_token_id)
    return out[0, ids["input_ids"].shape[1]:].tolist()


def run(batch: GenerationBatch, rows: list[Row], late: dict[int, list[Row]] | None = None) -> None:
    late = late or {}
    finished: list[Row] = []
    for n in range(400):
        finished += batch.step(rows if n == 0 else late.get(n, []))
        if len(finished) == len(rows) + sum(map(len, late.values())):
            return
    raise AssertionError("the rows did not finish")


def spec(dirs: dict[str, Path], name: str) -> AdapterSpec:
    return AdapterSpec(name, str(dirs[name]))


def test_the_adapters_config_says_fan_in_fan_out_for_gpt2s_conv1d(dirs: dict[str, Path]) -> None:
    import json

    assert json.loads((dirs["alpha"] / "adapter_config.json").read_text())["fan_in_fan_out"] is True


def test_an_adapters_row_generates_its_merged_models_tokens(pipe: Any, dirs: dict[str, Path]) -> None:
    batch = GenerationBatch(pipe, adapters=cache_for(pipe.model, AdapterBudget()))
    row = batch.prepare("r", PROMPTS[1], {"max_new_tokens": 12}, None, adapter=spec(dirs, "beta"))
    run(batch, [row])
    assert row.sequence.ids == reference(dirs, "beta", PROMPTS[1], 12)
    assert row.sequence.ids != reference(dirs, None, PROMPTS[1], 12)  # the adapter changes the answer


def test_a_batch_mixing_the_base_and_four_adapters_gives_each_row_its_own_tokens(pipe: Any,
                                                                                 dirs: dict[str, Path]) -> None:
    batch = GenerationBatch(pipe, adapters=cache_for(pipe.model, AdapterBudget()))
    names: list[str | None] = [None, *ADAPTERS]
    # Every prompt for every adapter, the shared HEAD among them: no row may reuse another adapter's head.
    rows = {(name, p): batch.prepare(f"{name}-{p}", prompt, {"max_new_tokens": 6 + 2 * p}, None,
                                     adapter=spec(dirs, name) if name else None)
            for name in names for p, prompt in enumerate(PROMPTS)}
    first = [r for (name, p), r in rows.items() if p % 2 == 0]
    late = {3: [r for (name, p), r in rows.items() if p % 2 == 1]}  # they join rows that are decoding
    run(batch, first, late)
    for (name, p), row in rows.items():
        assert row.sequence.ids == reference(dirs, name, PROMPTS[p], 6 + 2 * p), (name, p)


def test_an_adapter_of_the_lm_head_fails_its_own_row_only(pipe: Any, dirs: dict[str, Path]) -> None:
    batch = GenerationBatch(pipe, adapters=cache_for(pipe.model, AdapterBudget()))
    with pytest.raises(Conflict, match="LM head"):
        batch.prepare("h", PROMPTS[0], {"max_new_tokens": 4}, None, adapter=spec(dirs, "head"))
    row = batch.prepare("a", PROMPTS[0], {"max_new_tokens": 4}, None, adapter=spec(dirs, "alpha"))
    run(batch, [row])
    assert row.sequence.ids == reference(dirs, "alpha", PROMPTS[0], 4)


def test_a_budget_of_one_adapter_keeps_every_running_rows_weights(pipe: Any, dirs: dict[str, Path]) -> None:
    cache = cache_for(pipe.model, AdapterBudget(max_count=1))
    batch = GenerationBatch(pipe, adapters=cache)
    rows = [batch.prepare(name, PROMPTS[3], {"max_new_tokens": 8}, None, adapter=spec(dirs, name))
            for name in ADAPTERS[:2]]
    batch.step(rows[:1])
    batch.step(rows[1:])  # alpha is running: its row keeps its weights while the cache holds beta alone
    assert list(cache.held) == ["beta"]
    for _ in range(40):
        if not batch.rows:
            break
        batch.step()
    for name, row in zip(ADAPTERS, rows):
        assert row.sequence.ids == reference(dirs, name, PROMPTS[3], 8), name


@pytest.mark.parametrize("streamed", [False, True])
def test_static_batches_refuse_an_adapters_generation_and_never_answer_the_bases_tokens(
        dirs: dict[str, Path], streamed: bool) -> None:
    """Generation in static batches (continuous batching off) has no adapter rows: 409, the base's rows answered."""
    from models_registry.catalog.specs import ModelSpec, TaskSpec
    from models_registry.core.batch_types import BatchPolicy, ItemFailure
    from models_registry.inference.model_runner import PipelineRunner

    task = TaskSpec(name="text-generation", task="text-generation", parameters={}, pooling=None, normalize=False,
                    policy=BatchPolicy(), timeout_s=30.0)
    model = ModelSpec(name="base", source=str(dirs["base"]), revision="", device="cpu", dtype="float32", enabled=True,
                      tasks={"text-generation": task}, default_task="text-generation",
                      adapters=(spec(dirs, "alpha"),))
    runner = PipelineRunner(packing=False, torchscript=False)
    loaded = runner.load(model)
    params = {"max_new_tokens": 3, **({"stream": True} if streamed else {})}
    outputs = runner.run(loaded, task, [PROMPTS[1], PROMPTS[1]], [params, params], sinks=None,
                         adapters=[None, model.adapters[0]])
    assert not isinstance(outputs[0], ItemFailure)
    assert isinstance(outputs[1], ItemFailure) and isinstance(outputs[1].error, Conflict)
    assert "continuous batch" in outputs[1].error.message
