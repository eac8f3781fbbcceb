"""A worker's loaded adapters of one base: read on first use, checked against the loaded layers, least recently
used unloaded past a count or a byte budget."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from models_registry.catalog.specs import AdapterSpec
from models_registry.core import adapter_files, model_files
from models_registry.core.errors import Conflict, Unavailable
from models_registry.inference.batched_lora import BatchedLora, LoraWeights

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AdapterBudget:
    """How many adapters, and how many bytes of them, one model of a worker holds (HOSTING_MAX_LOADED_ADAPTERS,
    HOSTING_ADAPTER_MEMORY_BYTES)."""

    max_count: int = 16
    max_bytes: int = 256 * 2**20


def read_weights(adapter: AdapterSpec, lora: BatchedLora) -> LoraWeights:
    """An adapter's tensors on lora's model (its device and dtype), by the model's module paths (blocking).

    Raises adapter_files.AdapterProblem when the files do not fit the loaded base.
    """
    from safetensors.torch import load_file

    revision = adapter.revision or None
    config_path = model_files.file_path(adapter.source, revision, adapter_files.CONFIG_FILE)
    weights_path = model_files.file_path(adapter.source, revision, adapter_files.WEIGHTS_FILE)
    if config_path is None or weights_path is None:
        raise adapter_files.AdapterProblem(f"{adapter.name}: no {adapter_files.CONFIG_FILE} and "
                                           f"{adapter_files.WEIGHTS_FILE} at its source")
    config = adapter_files.read_config(config_path)
    tensors = load_file(weights_path)
    manifest = adapter_files.manifest_of(config, {k: tuple(v.shape) for k, v in tensors.items()})
    model = lora.model
    parameter = next(model.parameters())
    prefix = str(getattr(model, "base_model_prefix", "") or "")
    linears = {path: shape for path in lora.modules if (shape := lora.linear_shape(path)) is not None}
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weights = LoraWeights(adapter.name, (adapter.source, adapter.revision))
    place = {"device": parameter.device, "dtype": parameter.dtype}
    for layer in manifest.layers.values():
        path = adapter_files.resolve_path(layer.path, linears, prefix)
        if path is None or linears[path] != (layer.out_features, layer.in_features):
            raise adapter_files.AdapterProblem(f"{adapter.name}: target module {layer.path!r} is not a Linear layer "
                                               f"of {layer.out_features} x {layer.in_features} in the loaded base")
        if head is not None and lora.modules[path] is head:  # a decoder keeps only some positions' logits
            raise adapter_files.AdapterProblem(f"{adapter.name}: adapters of the LM head ({layer.path!r}) are not "
                                               "served; target the attention and MLP layers")
        key = adapter_files.KEY_PREFIX + layer.path
        weights.layers[path] = (tensors[key + adapter_files.LORA_A].to(**place),
                                tensors[key + adapter_files.LORA_B].to(**place), layer.scaling)
    for module in manifest.saved.values():
        path = adapter_files.resolve_path(module.path, linears, prefix)
        if path is None or linears[path] != (module.out_features, module.in_features):
            raise adapter_files.AdapterProblem(f"{adapter.name}: modules_to_save {module.path!r} does not fit the "
                                               "loaded base's Linear layer")
        if head is not None and lora.modules[path] is head:
            raise adapter_files.AdapterProblem(f"{adapter.name}: a saved LM head ({module.path!r}) is not served")
        key = adapter_files.KEY_PREFIX + module.path
        bias = tensors.get(key + ".bias")
        weights.saved[path] = (tensors[key + ".weight"].to(**place), bias.to(**place) if bias is not None else None)
    return weights


class AdapterCache:
    """The adapters loaded on one model of a base (per task kind: each pipeline has its own model)."""

    def __init__(self, lora: BatchedLora, max_count: int, max_bytes: int) -> None:
        self.lora = lora
        self.max_count = max(1, max_count)
        self.max_bytes = max_bytes
        self.held: OrderedDict[str, LoraWeights] = OrderedDict()

    @property
    def nbytes(self) -> int:
        """Bytes the held adapters take."""
        return sum(w.nbytes for w in self.held.values())

    def get(self, adapter: AdapterSpec) -> LoraWeights:
        """The adapter's weights, loaded now if not held (or held from another source); raises a HostingError."""
        held = self.held.get(adapter.name)
        if held is not None and held.identity == (adapter.source, adapter.revision):
            self.held.move_to_end(adapter.name)
            return held
        if not adapter.source:
            raise Unavailable(f"adapter {adapter.name!r} is no longer served by its base model")
        try:
            weights = read_weights(adapter, self.lora)
        except adapter_files.AdapterProblem as error:
            logger.warning("adapter %s not loaded: %s", adapter.name, error)
            raise Conflict(f"adapter {adapter.name!r} does not fit its base model as loaded: {error}") from None
        except OSError as error:
            logger.warning("adapter %s not loaded: %s", adapter.name, error)
            raise Unavailable(f"adapter {adapter.name!r} could not be loaded") from None
        self.lora.hook([*weights.layers, *weights.saved])
        self.held[adapter.name] = weights
        logger.info("adapter %s loaded (%.1f KiB)", adapter.name, weights.nbytes / 1024)
        return weights

    def evict(self, keep: Sequence[str]) -> None:
        """Unload the least recently used adapters past the budget (never those of the batch running: keep)."""
        while len(self.held) > 1 and (len(self.held) > self.max_count or self.nbytes > self.max_bytes):
            victim = next((name for name in self.held if name not in keep), None)
            if victim is None:
                return
            del self.held[victim]
            logger.info("adapter %s unloaded (least recently used)", victim)

    def rows(self, adapters: Sequence[AdapterSpec | None]) -> Any:
        """The batch's rows on the model (a BatchedLora.rows context): each input's adapter, loaded where it is not."""
        distinct: list[str] = []
        for adapter in adapters:
            if adapter is not None and adapter.name not in distinct:
                distinct.append(adapter.name)
        by_name = {a.name: a for a in adapters if a is not None}
        loaded = [self.get(by_name[name]) for name in distinct]
        self.evict(distinct)
        slots = [0 if a is None else distinct.index(a.name) + 1 for a in adapters]
        return self.lora.rows(loaded, slots)


def cache_for(model: torch.nn.Module, budget: AdapterBudget) -> AdapterCache:
    """A fresh adapter cache on model (its hooks installed as adapters load)."""
    return AdapterCache(BatchedLora(model), budget.max_count, budget.max_bytes)

