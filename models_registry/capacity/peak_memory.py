"""Measuring what a batch or a load adds to the process: peak resident set on CPU, the allocator's peak on CUDA."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from pathlib import Path
from typing import Any

from models_registry.inference import device_memory

logger = logging.getLogger(__name__)

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
_libc: Any = None


M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
MEASURED_MMAP_THRESHOLD = 256 * 1024  # while measuring: every large block is its own mapping, freed at once
SERVING_MMAP_THRESHOLD = 32 * 1024 * 1024  # otherwise: glibc's own dynamic ceiling, heap blocks reused


def _mmap_threshold(size: int) -> None:
    """Blocks over size bytes get a mapping of their own, unmapped when freed.

    While a batch is measured, that makes the resident set follow the live tensors
    exactly (repeat measurements agree within 1%, against +-20% with reused heap blocks);
    between measurements blocks up to 32 MiB are reused from the heap, which is faster.
    """
    if _libc:
        try:
            _libc.mallopt(M_MMAP_THRESHOLD, size)
        except AttributeError:
            pass


def _trim() -> None:
    """Give freed heap pages back to the kernel, so the next peak is measured from what is really in use.

    glibc keeps freed blocks (its mmap threshold grows after large frees): without this a
    batch that reuses the previous batch's pages shows no peak at all.
    """
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        except OSError:
            _libc = False
    if _libc:
        try:
            _libc.malloc_trim(0)
        except AttributeError:  # not glibc
            pass


def _status_bytes(*fields: str) -> dict[str, int]:
    found: dict[str, int] = {}
    try:
        for line in _STATUS.read_text().splitlines():
            name, _, value = line.partition(":")
            if name in fields:
                found[name] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return found


def resident_bytes() -> int:
    """This process's resident set now (0 where /proc is absent)."""
    return _status_bytes("VmRSS").get("VmRSS", 0)


class PeakProbe:
    """start() before the work, peak() after it: the most bytes the work added over the resting process."""

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self.cuda = device.startswith("cuda")
        self.baseline = 0
        self.works = self.cuda or (_STATUS.exists() and _CLEAR_REFS.exists())

    def start(self) -> int:
        """Reset the peak counter; the resting bytes (the models and the runtime) it measures from."""
        if self.cuda:
            self.baseline = device_memory.reset_peak(self.device)
            return self.baseline
        _trim()
        _mmap_threshold(MEASURED_MMAP_THRESHOLD)
        try:
            _CLEAR_REFS.write_text("5")  # "5": reset the peak resident set (VmHWM) to the current one
        except OSError:
            self.works = False
        self.baseline = resident_bytes()
        return self.baseline

    def peak(self) -> int:
        """Bytes over the baseline at the peak since start()."""
        if self.cuda:
            return max(0, device_memory.peak_allocated(self.device) - self.baseline)
        peak = _status_bytes("VmHWM").get("VmHWM", 0)
        _mmap_threshold(SERVING_MMAP_THRESHOLD)
        return max(0, peak - self.baseline)

    def resting(self) -> int:
        """Bytes in use between batches (after giving freed pages back)."""
        if self.cuda:
            return device_memory.allocated(self.device)
        _trim()
        return resident_bytes()

    def release_cache(self) -> None:
        """After an out-of-memory error or an unload: hand cached blocks back."""
        if self.cuda:
            device_memory.release_cache()
        _trim()


def device_total_bytes(device: str) -> int:
    """What the device holds in all: the GPU's memory, or on CPU the machine's or cgroup's limit (lower)."""
    if device.startswith("cuda"):
        return device_memory.total_bytes(device)
    limits = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                limits.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            limits.append(int(text))
    return min(limits) if limits else 8 << 30
