"""A decoder whose window text does not grow as a prefix: the whole decode is taken, and later windows stay short."""

from __future__ import annotations

from models_registry.inference.incremental_text import IncrementalText

WORDS = ["alpha", "beta", "gamma", "delta", "eps"]


def merging(ids: list[int]) -> str:
    """Words joined by spaces, "beta gamma" written "BG" (a cleanup rule that rewrites text already read)."""
    return " ".join(WORDS[i] for i in ids).replace("beta gamma", "BG")


def test_a_window_whose_head_is_rewritten_is_decoded_whole_then_windows_go_on() -> None:
    seen: list[int] = []

    def counting(ids: list[int]) -> str:
        seen.append(len(ids))
        return merging(ids)

    incremental, ids = IncrementalText(counting), [0, 1, 2, 3, 4, 0, 3]
    for n, token in enumerate(ids, start=1):
        assert incremental.add(token) == merging(ids[:n])
    assert 3 in seen[4:7]  # the third token's text was decoded whole ...
    assert max(seen[7:]) <= 2  # ... and the windows after it are short again
