"""The accelerator's allocator, as the memory measurements need it (torch is imported here, not in capacity/)."""

from __future__ import annotations


def reset_peak(device: str) -> int:
    """Wait for the device, reset its allocator's peak counter, and return the bytes allocated now."""
    import torch

    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    return int(torch.cuda.memory_allocated(device))


def peak_allocated(device: str) -> int:
    """The most bytes the allocator held since the last reset_peak (after the device's work is done)."""
    import torch

    torch.cuda.synchronize(device)
    return int(torch.cuda.max_memory_allocated(device))


def allocated(device: str) -> int:
    """Bytes the allocator holds now."""
    import torch

    return int(torch.cuda.memory_allocated(device))


def release_cache() -> None:
    """Hand the allocator's cached blocks back to the device."""
    import torch

    torch.cuda.empty_cache()


def total_bytes(device: str) -> int:
    """The device's memory in all."""
    import torch

    return int(torch.cuda.mem_get_info(device)[1])
