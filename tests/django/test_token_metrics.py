"""observe.metrics.observe_token: every request of a token and its input tokens counted, on the counters kept per label."""

from __future__ import annotations

from prometheus_client import REGISTRY

from models_registry.observe import metrics


def _counted(label: str) -> tuple[float, float]:
    return tuple(REGISTRY.get_sample_value(name, {"token": label}) or 0.0  # type: ignore[return-value]
                 for name in ("hosting_token_requests_total", "hosting_token_input_tokens_total"))


def test_each_request_and_its_input_tokens_are_counted_against_its_tokens_label() -> None:
    label, other = metrics.token_label("a", 987654), metrics.token_label("b", 987655)
    before, other_before = _counted(label), _counted(other)
    for tokens in (3, 0, 4):  # 0: a refunded charge counts the request, not tokens
        metrics.observe_token("a", 987654, tokens)
    metrics.observe_token("b", 987655, 5)
    assert _counted(label) == (before[0] + 3, before[1] + 7)
    assert _counted(other) == (other_before[0] + 1, other_before[1] + 5)
