"""Which exceptions mean "out of memory", whatever raised them (no torch or onnxruntime import needed)."""

from __future__ import annotations

# torch.cuda.OutOfMemoryError (and torch's CPU "DefaultCPUAllocator: can't allocate memory"
# RuntimeError), ONNX Runtime's "Failed to allocate memory" / bad_alloc, and Python's own MemoryError.
_OOM_TYPES = {"OutOfMemoryError", "MemoryError"}
_OOM_PHRASES = ("out of memory", "failed to allocate memory", "can't allocate memory", "bad_alloc",
                "cannot allocate memory")


def is_out_of_memory(error: BaseException) -> bool:
    """Whether error is an allocation failure (a batch that may fit once split), not a bug or a bad input."""
    if isinstance(error, MemoryError):
        return True
    if any(cls.__name__ in _OOM_TYPES for cls in type(error).__mro__):
        return True
    if type(error).__name__ in {"RuntimeError", "RuntimeException", "Fail", "EPFail"}:
        text = str(error).lower()
        return any(phrase in text for phrase in _OOM_PHRASES)
    return False
