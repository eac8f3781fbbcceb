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


def test_the_sampled_arm_is_paired_with_the_unsampled_arm_of_the_same_processes() -> None:
    paired = paired_ratios({"product": _rates(100, 100), "product+otel": _rates(94, 96),
                            "product+otel unsampled": _rates(100, 98)})
    assert paired["product+otel / product+otel unsampled (the same processes)"][64]["ratios"] == [0.94, 0.98]
    assert paired["product+otel unsampled"][64]["ratios"] == [1.0, 0.98]  # the arm against the untraced product


def test_each_request_of_an_arm_carries_its_own_traceparent_with_the_arms_flags() -> None:
    from bench.loadgen import inference_requests
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    def flags(traceparent: str) -> int:
        extracted = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
        return int(trace.get_current_span(extracted).get_span_context().trace_flags)

    def traceparents(flags: str | None) -> list[str]:
        raws = inference_requests("http://127.0.0.1:9", "m", "t", ["a", "b", "c"], flags)
        return [line.split(": ", 1)[1] for raw in raws for line in raw.split(b"\r\n\r\n")[0].decode().split("\r\n")
                if line.lower().startswith("traceparent:")]

    assert traceparents(None) == []
    sampled, unsampled = traceparents("01"), traceparents("00")
    assert len(set(sampled)) == 3 and sampled == traceparents("01")  # one per request, the same every run
    assert [flags(v) for v in sampled] == [1, 1, 1]
    assert [flags(v) for v in unsampled] == [0, 0, 0]
