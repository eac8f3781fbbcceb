"""The shared KV cache of a decode batch, written in place: one token per step costs no copy of the cache.

transformers' `DynamicLayer` concatenates each step's keys and values onto the whole cache, so a
step of 32 rows at 200 tokens copies every layer's cache once (GPT-2 small: about 470 MB a step).
A `GrowingLayer` keeps its keys and values in buffers with room to grow along the sequence axis:
a step writes its one column into the room and hands attention a view of the filled part; only
when the room runs out are the buffers reallocated, half again as large, so copies are amortized
over many steps. Rows joining or leaving (`decode_batch`) assign whole new tensors, which the layer
adopts into fresh buffers with room.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

MIN_ROOM = 64  # columns of room a buffer gets at least: one reallocation per 64 steps of a small batch


class GrowingLayer(DynamicLayer):
    """A cache layer whose keys and values are views of buffers with room along the sequence axis."""

    def __init__(self, **kwargs: object) -> None:
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None
        # One length each: a join assigns new keys, then builds the new values from the old ones.
        self._key_length = 0
        self._value_length = 0
        super().__init__(**kwargs)

    @property  # type: ignore[override]
    def keys(self) -> torch.Tensor | None:
        """The filled part of the key buffer: [rows, heads, length, head_dim]."""
        return None if self._key_buffer is None else self._key_buffer[:, :, :self._key_length]

    @keys.setter
    def keys(self, tensor: torch.Tensor | None) -> None:
        self._key_buffer = None if tensor is None else _with_room(tensor, tensor.shape[-2])
        self._key_length = 0 if tensor is None else tensor.shape[-2]

    @property  # type: ignore[override]
    def values(self) -> torch.Tensor | None:
        """The filled part of the value buffer."""
        return None if self._value_buffer is None else self._value_buffer[:, :, :self._value_length]

    @values.setter
    def values(self, tensor: torch.Tensor | None) -> None:
        self._value_buffer = None if tensor is None else _with_room(tensor, tensor.shape[-2])
        self._value_length = 0 if tensor is None else tensor.shape[-2]

    def room(self) -> int:
        """Columns that can still be written before the buffers are reallocated."""
        if self._key_buffer is None or self._value_buffer is None:
            return 0
        return min(self._key_buffer.shape[-2] - self._key_length, self._value_buffer.shape[-2] - self._value_length)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object,
               **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new columns in place (reallocating with room when full); the filled views."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self._key_buffer is None or self._value_buffer is None or self._key_length == 0:
            self.keys, self.values = key_states, value_states
            return self.keys, self.values  # type: ignore[return-value]
        length = self._key_length
        end = length + key_states.shape[-2]
        if end > min(self._key_buffer.shape[-2], self._value_buffer.shape[-2]):
            self._key_buffer = _with_room(self._key_buffer[:, :, :length], end)
            self._value_buffer = _with_room(self._value_buffer[:, :, :length], end)
        self._key_buffer[:, :, length:end] = key_states
        self._value_buffer[:, :, length:end] = value_states
        self._key_length = self._value_length = end
        return self.keys, self.values  # type: ignore[return-value]

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Dtype and device from the first keys (the buffers come with the first write)."""
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True


def growing(cache: DynamicCache) -> DynamicCache:
    """The cache with its plain layers replaced by growing ones holding the same keys and values (in place)."""
    for index, layer in enumerate(cache.layers):
        if isinstance(layer, GrowingLayer) or type(layer) is not DynamicLayer:
            continue
        replacement = GrowingLayer()
        if layer.is_initialized and layer.keys is not None and layer.keys.numel():
            replacement.lazy_initialization(layer.keys, layer.values)
            replacement.keys, replacement.values = layer.keys, layer.values
        cache.layers[index] = replacement
    return cache


def _with_room(tensor: torch.Tensor, needed: int) -> torch.Tensor:
    """A buffer holding tensor's columns first, with room for at least needed + half again (MIN_ROOM at least)."""
    rows, heads, length, width = tensor.shape
    capacity = needed + max(MIN_ROOM, needed // 2)
    buffer = tensor.new_empty((rows, heads, capacity, width))
    buffer[:, :, :length] = tensor
    return buffer
