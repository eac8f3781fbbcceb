"""bench.tiny's paired ratios: each round's variant against the product, and the traced product against every
untraced copy of the same round (the A/A control's spread taken out)."""

from __future__ import annotations

from bench.tiny import median_interval, paired_ratios


def _rates(*req_s: float) -> dict[int, list[dict[str, float]]]:
    return {64: [{"req_s": rate} for rate in req_s]}


def test_each_variant_is_paired_with_the_product_round_by_round() -> None:
    paired = paired_ratios({"product": _rates(100, 200, 150), "product+otel": _rates(90, 190, 150)})
    assert paired == {"product+otel": {64: {"ratios": [0.9, 0.95, 1.0], "median": 0.95}}}


def test_the_traced_product_is_paired_with_the_mean_of_every_untraced_copy() -> None:
    paired = paired_ratios({"product": _rates(100, 200, 100), "product@HEAD": _rates(110, 180, 100),
                            "product+otel": _rates(95, 171, 80)})
    assert paired["product@HEAD"][64]["ratios"] == [1.1, 0.9, 1.0]
    assert paired["product+otel / mean of product, product@HEAD"][64] == {"ratios": [0.905, 0.9, 0.8], "median": 0.9}


def test_without_an_untraced_copy_or_a_traced_product_there_is_no_such_pair() -> None:
    assert list(paired_ratios({"product": _rates(100), "product@HEAD": _rates(90)})) == ["product@HEAD"]
    assert paired_ratios({"infinity": _rates(100)}) == {}


def test_enough_rounds_give_the_medians_interval_and_the_same_rounds_the_same_one() -> None:
    rates = [100, 90, 110, 95, 105, 100, 98, 102]
    paired = paired_ratios({"product": _rates(*[100] * 8), "product+otel": _rates(*rates)})["product+otel"]
    low, high = paired[64]["interval"]
    assert low <= paired[64]["median"] <= high and (low, high) == median_interval([r / 100 for r in rates])
    assert low < high  # the rounds differ: so do their resampled medians
    assert median_interval([0.97] * 6) == (0.97, 0.97) and median_interval([1.0] * 4) is None
