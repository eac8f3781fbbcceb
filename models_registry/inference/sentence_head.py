"""What follows the transformer in a sentence-transformers model: pooling over tokens and the Dense projections.

The formulas are sentence-transformers' own (`models.Pooling`, `models.Dense`), written over padded token
embeddings and their attention mask, so a model gives the vectors its authors publish. The layout
(which modes, which layers) is what the model's files say: core.model_files.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import torch

from models_registry.core import model_files, model_layout


def pool(hidden: torch.Tensor, mask: torch.Tensor, modes: tuple[str, ...],
         prompt_length: int | None = None) -> torch.Tensor:
    """[batch, tokens, dim] and its 0/1 mask -> [batch, dim * len(modes)], the modes concatenated in order.

    prompt_length: tokens at the start of each input (after left padding) left out, as `include_prompt: false`.
    """
    if prompt_length:
        mask = _without_prompt(mask, prompt_length)
    pieces: list[torch.Tensor] = []
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    for mode in modes:
        if mode == "cls":
            first = mask.to(torch.int).argmax(dim=1)  # the first real token: 0 unless padded on the left
            pieces.append(hidden[torch.arange(hidden.shape[0], device=hidden.device), first])
        elif mode == "max":
            pieces.append(hidden.masked_fill(weights == 0, float("-inf")).max(dim=1).values)
        elif mode in ("mean", "mean_sqrt_len_tokens"):
            total = (hidden * weights).sum(dim=1)
            count = torch.clamp(weights.sum(dim=1), min=1e-9)
            pieces.append(total / count if mode == "mean" else total / torch.sqrt(count))
        elif mode == "weightedmean":
            positions = torch.arange(1, hidden.shape[1] + 1, device=hidden.device, dtype=hidden.dtype)
            weighted = weights * positions.view(1, -1, 1)
            pieces.append((hidden * weighted).sum(dim=1) / torch.clamp(weighted.sum(dim=1), min=1e-9))
        elif mode == "lasttoken":
            found, from_end = mask.flip(1).max(1)
            from_end = torch.where(found == 0, hidden.shape[1] - 1, from_end)
            last = hidden.shape[1] - from_end - 1
            pieces.append((hidden * weights)[torch.arange(hidden.shape[0], device=hidden.device), last])
        else:
            raise ValueError(f"pooling mode {mode!r} is not computed here")
    return torch.cat(pieces, dim=-1)


def _without_prompt(mask: torch.Tensor, prompt_length: int) -> torch.Tensor:
    """The mask with each input's first prompt_length real tokens cleared (after any left padding)."""
    mask = mask.clone()
    pads = mask.to(torch.int32).argmax(dim=1)
    positions = torch.arange(mask.shape[1], device=mask.device).unsqueeze(0)
    mask[positions < (pads + prompt_length).unsqueeze(1)] = 0
    return mask


def prompt_length(tokenizer: Any, prompt: str) -> int:
    """The prompt's tokens as an input starts with them: its encoding less a trailing special token (EOS, SEP)."""
    ids = tokenizer(prompt)["input_ids"]
    return len(ids) - 1 if ids and ids[-1] in set(tokenizer.all_special_ids) else len(ids)


@dataclass
class DenseHead:
    """The Dense modules after pooling, in order: linear, activation, and the residual where configured."""

    layers: list[tuple[torch.nn.Linear, torch.nn.Module, torch.nn.Module | None]]

    @torch.inference_mode()
    def __call__(self, pooled: torch.Tensor) -> torch.Tensor:
        for linear, activation, residual in self.layers:
            projected = activation(linear(pooled.to(linear.weight.dtype)))
            if residual is not None:
                projected = projected + residual(pooled)
            pooled = projected
        return pooled


def load_dense(source: str, revision: str | None, layers: tuple[model_layout.DenseLayer, ...], device: Any,
               dtype: torch.dtype) -> DenseHead:
    """The Dense modules' weights from their folders (model.safetensors, else pytorch_model.bin)."""
    loaded = []
    for layer in layers:
        weights = _weights(source, revision, layer.path)
        linear = torch.nn.Linear(layer.in_features, layer.out_features, bias=layer.bias)
        residual = None
        if layer.residual:
            residual = torch.nn.Identity() if layer.in_features == layer.out_features else torch.nn.Linear(
                layer.in_features, layer.out_features, bias=False)
        state = {k.removeprefix("linear."): v for k, v in weights.items() if k.startswith("linear.")}
        try:
            linear.load_state_dict(state)
            if isinstance(residual, torch.nn.Linear):
                residual.load_state_dict({k.removeprefix("residual."): v for k, v in weights.items()
                                          if k.startswith("residual.")})
        except RuntimeError as error:
            raise ValueError(f"{layer.path}: the weights do not fit its config.json ({error})") from None
        modules = [m.to(device=device, dtype=dtype).eval() if m is not None else None
                   for m in (linear, _activation(layer.activation), residual)]
        loaded.append((modules[0], modules[1], modules[2]))
    return DenseHead(layers=loaded)


def _weights(source: str, revision: str | None, folder: str) -> dict[str, torch.Tensor]:
    safetensors = model_files.file_path(source, revision, f"{folder}/model.safetensors")
    if safetensors is not None:
        from safetensors.torch import load_file

        return load_file(safetensors)
    pickled = model_files.file_path(source, revision, f"{folder}/pytorch_model.bin")
    if pickled is None:
        raise ValueError(f"{folder}: neither model.safetensors nor pytorch_model.bin is there")
    return torch.load(pickled, map_location="cpu", weights_only=True)


def _activation(path: str) -> torch.nn.Module:
    """A torch.nn module class named by its import path (only torch's own: no code from a model directory runs)."""
    module_name, _, class_name = path.rpartition(".")
    try:
        found = getattr(importlib.import_module(module_name), class_name) if module_name.startswith("torch") else None
    except (ImportError, AttributeError):
        found = None
    if not (isinstance(found, type) and issubclass(found, torch.nn.Module)):
        raise ValueError(f"Dense activation {path!r} is not a torch.nn module")
    return found()
