"""A new model's first batches, run at load so its memory fit is trained before real traffic comes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from models_registry.capacity.batch_memory import BatchMemory
from models_registry.core.task_key import TaskKey
from models_registry.inference.backend import ModelRunner
from models_registry.catalog.rollout import split_wire
from models_registry.catalog.specs import ModelSpec, TaskSpec

if TYPE_CHECKING:
    from models_registry.inference.loading import LoadedModel  # torch: not imported at run time

# Task kinds whose input is one plain string (the others learn from their first real batches).
WARM_TASKS = {"feature-extraction", "text-classification", "token-classification", "fill-mask"}


def _text(loaded: LoadedModel, task_kind: str, tokens: int) -> str:
    words = ["hello"] * max(1, tokens - 2)  # one token per word, plus the two special tokens
    if task_kind == "fill-mask":
        pipe = loaded.pipelines.get("fill-mask")
        words[-1] = getattr(getattr(pipe, "tokenizer", None), "mask_token", None) or "[MASK]"
    return " ".join(words)


def steps(memory: BatchMemory, runner: ModelRunner, spec: ModelSpec, loaded: LoadedModel) -> list[Callable[[], bool]]:
    """Steps that measure a few batch shapes of each plain-text task of the model just loaded.

    The worker runs each in its compute thread, between the batches of the models it serves
    (a version loading beside a live one must not stop the live one's traffic); False: stop.
    """
    found: list[Callable[[], bool]] = []
    if not memory.enabled:
        return found
    for task in spec.tasks.values():
        if task.task not in WARM_TASKS:
            continue
        key = TaskKey(spec.name, task.name)

        def run_shape(items: int, tokens: int, task: TaskSpec = task, key: TaskKey = key) -> None:
            text = _text(loaded, task.task, tokens)
            cost = loaded.count_tokens(text)
            params = dict(task.parameters)
            memory.run(key, [cost] * items,
                       lambda at: runner.run(loaded, task, [text] * len(at), [params] * len(at)))

        found += memory.warm_up_steps(key, int(getattr(loaded, "max_tokens", 512)), run_shape)
    return found


def inherit_fits(memory: BatchMemory, spec: ModelSpec, ready: list[ModelSpec]) -> None:
    """A version computing what a ready version of the same model computes (Load now's copy) takes its fits."""
    model = split_wire(spec.name)[0]
    for other in ready:
        if other.name != spec.name and split_wire(other.name)[0] == model and other.load_key() == spec.load_key():
            for task_name in spec.tasks:
                memory.inherit(TaskKey(spec.name, task_name), TaskKey(other.name, task_name))
            return
