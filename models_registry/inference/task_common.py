"""What the task runs of every family share: the model bundle, the model's length limit, msgpack-safe outputs.

Each task run takes a task's loaded model (a transformers pipeline, or a ModelBundle for
the tasks transformers 5 has no pipeline for), a batch of inputs that share parameters
and the validated parameters; it returns one msgpack-safe output per input, in input
order, in the Hugging Face Inference API shape of that task's per-input answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

# Forwards of fewer real tokens run on one CPU thread: waking a second thread for every
# small matrix costs more than it saves (one to four sentences are slower on two threads),
# while from about eight sentences two threads win.
SMALL_FORWARD_TOKENS = 128


@dataclass
class ModelBundle:
    """A model and its tokenizer, for the tasks transformers 5 removed from pipeline()."""

    model: Any
    tokenizer: Any


def to_plain(value: Any) -> Any:
    """numpy and torch scalars to Python ones, tuples to lists, keys to str (msgpack-safe)."""
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, torch.Tensor):
        return value.tolist()
    return value


def per_input(raw: Any, count: int) -> list[Any]:
    """A pipeline's answer as one entry per input: the answer to one input may come back unwrapped.

    One fill-mask text with two masks gives a list per mask, but one text it remains.
    """
    if count == 1 and not (len(raw) == 1 and isinstance(raw[0], list)):
        return [raw]
    return list(raw)


def max_positions(model: Any, tokenizer: Any) -> int | None:
    """The most tokens the model takes (its position embeddings, else the tokenizer's limit)."""
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(model.config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    limit = getattr(tokenizer, "model_max_length", None)
    return limit if isinstance(limit, int) and 0 < limit < 100_000 else None


@contextmanager
def cpu_threads_for(tokens: int, device: Any) -> Iterator[None]:
    """One torch thread for a small CPU forward, the configured number otherwise."""
    threads = torch.get_num_threads()
    if tokens >= SMALL_FORWARD_TOKENS or threads <= 1 or getattr(device, "type", device) != "cpu":
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
