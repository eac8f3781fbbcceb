"""A request's "seed" applies to its own generation only, never to the process-wide generator.

torch.manual_seed(seed) would reseed the generator every other request samples from,
making their outputs predictable to whoever sent the seed. fork_rng saves the state and
restores it after the block.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch


@contextmanager
def seeded(seed: int | None, device: Any = "cpu") -> Iterator[None]:
    """Run the block with the random generators seeded by seed, then restore their previous state."""
    if seed is None:
        yield
        return
    device = torch.device(device)
    cuda = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed)
        yield
