"""What a request makes the server produce and hold, estimated before compute, bounded and charged (pure).

The token cost counts what a model reads; some requests make it answer far more than it
reads: fill-mask answers each mask with top_k entries that each repeat the whole text
(3.5 KB of "[MASK] " with top_k 100 was a 180 MB answer), and twenty base64 photos of
35 KB each decode to gigabytes of pixels. Both are estimated here from what the worker
knows before computing, refused over a per-request bound (413), and charged as tokens.
"""

from __future__ import annotations

import math
from typing import Any

from models_registry.core.errors import TooLarge

MAX_MASKS_PER_INPUT = 32  # the pipeline answers each mask on its own; no sentence needs more
FILL_MASK_DEFAULT_TOP_K = 5  # the pipeline's
ENTRY_BYTES = 160  # one answer entry's JSON besides the text it repeats: score, token, token_str, keys
ANSWER_BYTES_PER_TOKEN = 1024  # an answer is charged a token per KiB: one at HOSTING_MAX_ANSWER_BYTES, 16 K tokens
PIXELS_PER_TOKEN = 4096  # a decoded image's charge: one token per 64x64 pixels (typical images cost their patches)


def fill_mask_bytes(text: str, mask_token: str, params: dict[str, Any]) -> int:
    """The JSON bytes fill-mask answers text with: top_k (or len(targets)) entries per mask, each with the text."""
    masks = text.count(mask_token) if mask_token else 0
    if masks > MAX_MASKS_PER_INPUT:
        raise TooLarge(f"an input holds {masks} mask tokens {mask_token}; fill-mask takes at most "
                       f"{MAX_MASKS_PER_INPUT} per input (each is answered with top_k entries that repeat the text)")
    targets = params.get("targets")
    entries = len(targets) if targets else int(params.get("top_k") or FILL_MASK_DEFAULT_TOP_K)
    return masks * entries * (ENTRY_BYTES + len(text.encode()))


def check_answer_bytes(estimate: int, limit: int) -> None:
    """413 for a request whose answer is estimated over limit bytes (limit 0: no limit)."""
    if limit and estimate > limit:
        raise TooLarge(f"this request's answer would weigh about {estimate} bytes; one answer may weigh {limit} "
                       "(HOSTING_MAX_ANSWER_BYTES): send fewer inputs or masks, or a lower top_k")


def answer_tokens(estimate: int) -> int:
    """The tokens an answer of estimate bytes is charged."""
    return math.ceil(estimate / ANSWER_BYTES_PER_TOKEN)


def pixel_tokens(pixels: int) -> int:
    """The tokens decoding and holding pixels is charged."""
    return math.ceil(pixels / PIXELS_PER_TOKEN)
