"""dtype auto's decision from probe results (pure): the first half dtype whose vectors and labels match, else float32."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
from models_registry.inference.half_precision import MIN_COSINE, DtypeChoice, Probe, candidates, decide  # noqa: E402


def test_the_first_candidate_that_matches_is_chosen_with_its_figures() -> None:
    choice = decide("float32", [Probe("float16", min_cosine=0.99993, same_labels=True)])
    assert choice.dtype == "float16" and choice.min_cosine == 0.99993
    assert "min cosine 0.99993" in choice.reason and "labels same" in choice.reason


def test_a_vector_under_the_floor_or_a_changed_label_keeps_float32_with_the_reason() -> None:
    choice = decide("float32", [Probe("float16", min_cosine=MIN_COSINE - 1e-4), Probe("bfloat16", same_labels=False)])
    assert choice.dtype == "float32"
    assert "float16: min cosine 0.99940" in choice.reason and "bfloat16: labels differ" in choice.reason


def test_the_floor_itself_passes_and_the_second_candidate_can_win() -> None:
    assert decide("float32", [Probe("float16", min_cosine=MIN_COSINE)]).dtype == "float16"
    choice = decide("float32", [Probe("float16", error="overflow (non-finite outputs)"),
                                Probe("bfloat16", min_cosine=0.9999)])
    assert choice.dtype == "bfloat16"


def test_no_candidates_and_nothing_compared_keep_float32() -> None:
    assert decide("float32", []) == DtypeChoice("float32", "auto: float32 (half precision is tried on CUDA only)")
    assert decide("float32", [Probe("float16")]).dtype == "float32"


def test_only_cuda_tries_half_precision_unless_asked() -> None:
    assert candidates("cuda") == candidates("cuda:1") == ("float16", "bfloat16")
    assert candidates("cpu") == () and candidates("mps") == ()
    assert candidates("cpu", ("bfloat16",)) == ("bfloat16",)


def test_the_state_carries_choice_reason_and_cosine() -> None:
    state = DtypeChoice("float16", "why", 0.9999912).as_state()
    assert state == {"active_dtype": "float16", "dtype_reason": "why", "half_min_cosine": 0.999991}
