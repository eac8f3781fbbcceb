"""Whether a decoder model is served by the continuous batch (inference.generation_batch), checked once at load.

The slot attention runs inside the model's own forward, through transformers' attention
interface: a model qualifies by its shape (a causal LM head that can keep only some logits,
full attention in every layer) and by its numbers (verify: the logits of a few steps equal
those of a plain forward). Others are served in static batches.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

import torch

from models_registry.inference.generation_batch import GenerationBatch

CHECK_PROMPTS = ("Hello there, how are you today?", "A")
# The largest difference allowed, of the logits' scale. A model whose attention bypasses the slot
# cache is off by the scale itself; float32 differs only by summation order. Half precision rounds
# every layer's output at 2**-8 (bfloat16) or 2**-11 (float16) and attends in another order than
# a plain forward does: GPT-2 small's shape in bfloat16 differs by about 1% of the scale.
TOLERANCE = {torch.float32: 1e-2, torch.float16: 5e-2, torch.bfloat16: 5e-2}

logger = logging.getLogger(__name__)

_checked: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()  # verify's verdict per model


def supports(model: Any) -> bool:
    """Whether the model decodes through the slot attention: full attention in every layer, a causal LM head
    (and, once verify has run on it, logits equal to its own)."""
    return _checked.get(model) is not False and _shaped(model)


def _shaped(model: Any) -> bool:
    config = model.config
    if getattr(config, "is_encoder_decoder", False) or getattr(config, "reorder_and_upcast_attn", False):
        return False
    text = config.get_text_config(decoder=True)
    if getattr(text, "sliding_window", None) or any(t != "full_attention" for t in getattr(text, "layer_types", None)
                                                    or []):
        return False
    name = type(model).__name__
    return (name.endswith("ForCausalLM") or name.endswith("LMHeadModel")) and model._supports_logits_to_keep()


def verify(pipe: Any) -> bool:
    """Whether the slot attention gives the model's own logits (once, at load); where not, static batches serve it.

    Two prompts of different lengths decode three tokens together; each step's logits must equal
    those of a plain forward over the whole sequence (a model whose attention does not go through
    transformers' attention interface, or needs what the slot attention lacks, fails here).
    """
    model = pipe.model
    if not _shaped(model):
        return False
    try:
        batch = GenerationBatch(pipe, max_rows=2)
        seen: list[tuple[list[int], torch.Tensor]] = []  # what a row had read, and the logits it drew from
        plain_draw = batch._draw

        def keeping(rows: list[Any], logits: torch.Tensor) -> None:
            seen.extend((list(row.history), logits[n].float().clone()) for n, row in enumerate(rows))
            plain_draw(rows, logits)

        batch._draw = keeping  # type: ignore[method-assign]
        rows = [batch.prepare(f"check-{n}", text, {"max_new_tokens": 3, "do_sample": False}, None)
                for n, text in enumerate(CHECK_PROMPTS)]
        for _ in range(8):
            if not batch.step(rows if not seen else []) and not batch.rows:
                break
        tolerance = TOLERANCE.get(model.dtype, TOLERANCE[torch.float32])
        with torch.inference_mode():
            for context, logits in seen:
                expected = model(input_ids=torch.tensor([context], device=model.device)).logits[0, -1].float()
                off = float((expected - logits).abs().max()) / max(1.0, float(expected.abs().max()))
                if off > tolerance:
                    raise ValueError(f"its logits differ from the model's own by {off:.1%} of their scale "
                                     f"({model.dtype}: at most {tolerance:.0%})")
        ok = bool(seen)
    except Exception as error:  # noqa: BLE001 - any failure means: not through the slot cache
        logger.info("continuous batching off for %s: %s: %s", type(model).__name__, type(error).__name__, error)
        ok = False
    _checked[model] = ok
    return ok
