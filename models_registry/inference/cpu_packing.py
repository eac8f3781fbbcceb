"""A decoder's linear layers on CPU with their weights packed once for oneDNN, instead of at every call.

A decode step multiplies a few rows (one per sequence) by every weight matrix of the model;
the default CPU matmul packs the weight into its blocked layout on every call, which at 8 to 32
rows costs as much as the multiply itself. oneDNN's linear with a weight reordered once at load
(`torch.ops.mkldnn`, what torch.compile's CPU backend uses) does not. Measured on 2 EPYC cores,
one thread, GPT-2 small's shapes: 768x3072 at 8 rows 0.78 -> 0.40 ms, at 32 rows 2.3 -> 1.6 ms;
its LM head (50,257 wide) at 8 rows 29 -> 12 ms, at 32 rows 56 -> 26 ms. bfloat16 weights are packed
too where oneDNN computes bfloat16 (AVX512-BF16 or AMX): on 2 Sapphire Rapids cores, one thread, the
LM head at 32 rows 10.3 -> 6.9 ms (float32 packed: 23 ms), 768x3072 at 32 rows 0.40 -> 0.24 ms.

Each packed layer keeps its module (its parameters, its type); only its forward changes. Its dense
weight is freed unless another module shares it (a tied LM head keeps the embedding's), so the
model costs about what it did. The packed model must give the model's own logits on a sample
(checked here), else it is left as it was.
"""

from __future__ import annotations

import logging
import types
from typing import Any

import torch

logger = logging.getLogger(__name__)

SAMPLE = [[464, 3797, 7224, 262, 3290, 290, 262, 4171]]  # eight token ids: any vocabulary has them
# Of the logits' scale: packing only reorders the weights, but oneDNN may sum in another order;
# bfloat16 keeps 8 bits of mantissa, so its outputs round at about 2**-8 of their scale.
TOLERANCE = {torch.float32: 1e-3, torch.bfloat16: 2e-2}


def available(model: Any) -> bool:
    """Whether the model computes in float32 (or bfloat16 oneDNN supports) on a CPU with oneDNN's packed linear."""
    mkldnn = getattr(torch.ops, "mkldnn", None)
    if model.device.type != "cpu" or model.dtype not in TOLERANCE or not torch.backends.mkldnn.is_available():
        return False
    if model.dtype == torch.bfloat16 and not bfloat16_in_hardware():
        return False  # oneDNN would emulate it: slower than the plain matmul
    return hasattr(mkldnn, "_reorder_linear_weight") and hasattr(mkldnn, "_linear_pointwise")


def bfloat16_in_hardware() -> bool:
    """Whether oneDNN computes bfloat16 on this CPU in hardware (AVX512-BF16 or AMX), not emulated."""
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def pack(model: Any) -> int:
    """Pack every Linear (and GPT-2's Conv1D) of model; the number of layers packed (0: left as it was)."""
    if not available(model):
        return 0
    layers = [m for m in model.modules() if _weight(m) is not None]
    if not layers:
        return 0
    sample = torch.tensor(SAMPLE, device=model.device) % model.config.get_text_config(decoder=True).vocab_size
    with torch.inference_mode():
        before = model(input_ids=sample).logits.float()
        for module in layers:
            module._packed = torch.ops.mkldnn._reorder_linear_weight(_weight(module))
            module.forward = types.MethodType(_packed_forward, module)
        after = model(input_ids=sample).logits.float()
    if (after - before).abs().max() > TOLERANCE[model.dtype] * max(1.0, float(before.abs().max())):
        for module in layers:
            del module.forward, module._packed
        logger.info("packed linear layers off for %s: its logits differ", type(model).__name__)
        return 0
    shared = _shared_weights(model)
    for module in layers:
        if id(module.weight) not in shared:
            module.weight.data = torch.empty(0, dtype=module.weight.dtype)  # the packed copy replaces it
    return len(layers)


def _weight(module: torch.nn.Module) -> torch.Tensor | None:
    """The [out, in] weight of a linear layer (Linear, or Conv1D's transposed), else None."""
    if type(module) is torch.nn.Linear:
        return module.weight.detach()
    if type(module).__name__ == "Conv1D" and getattr(module, "weight", None) is not None:
        return module.weight.detach().t().contiguous()
    return None


def _packed_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, self._packed, self.bias, "none", [], "")


def _shared_weights(model: torch.nn.Module) -> set[int]:
    """Parameters more than one module holds (a tied LM head and embedding)."""
    seen: dict[int, int] = {}
    for module in model.modules():
        for parameter in module.parameters(recurse=False):
            seen[id(parameter)] = seen.get(id(parameter), 0) + 1
    return {key for key, count in seen.items() if count > 1}
