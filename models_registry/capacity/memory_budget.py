"""A worker's memory budget: the setting, or a share of what the device and the container allow."""

from __future__ import annotations

from dataclasses import dataclass

from models_registry.capacity import sizing
from models_registry.capacity.peak_memory import device_total_bytes

CPU_SHARE = 0.8  # of the machine's (or cgroup's) memory, shared by the workers `make run` starts there
GPU_SHARE = 0.9  # of the GPU's memory (one worker per accelerator)
MODEL_SHARE = 0.9  # models may take this much of the budget beyond the runtime; the rest is kept for batches


@dataclass(frozen=True)
class MemoryConfig:
    """The memory settings one worker runs with."""

    budget_bytes: int = 0  # HOSTING_WORKER_MEMORY_BYTES; 0 = auto
    cap_batches: bool = True  # HOSTING_MEMORY_CAP
    max_loaded: int = 0  # HOSTING_MAX_LOADED_MODELS; 0 = the budget alone decides


def worker_budget(setting: int, device: str) -> int:
    """Bytes one worker may use for its models and batches on device."""
    if setting > 0:
        return setting
    total = device_total_bytes(device)
    if device.startswith("cuda"):
        return int(total * GPU_SHARE)
    workers = sizing.default_layout(sizing.available_cores(), device).workers
    return int(total * CPU_SHARE / workers)


def model_bytes(budget_bytes: int, runtime_bytes: int) -> int:
    """What the models one worker holds may take together: MODEL_SHARE of the budget beyond the runtime."""
    return max(1, int((budget_bytes - runtime_bytes) * MODEL_SHARE))
