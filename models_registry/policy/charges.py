"""What a run charge plan charged (policy.rate_limits made it, broker.enqueue's script ran it): headers or the 429."""

from __future__ import annotations

import math

from models_registry.broker import enqueue
from models_registry.core.errors import RateLimited
from models_registry.observe import metrics
from models_registry.policy.rate_limits import DAY_S, MINUTE_S, Charge, Grant, Limits

_LIMIT_NAMES = {1: "requests_per_minute", 2: "tokens_per_minute", 3: "tokens_per_day"}


def _header_set(limit: int, used: int, reset_s: float) -> dict[str, str]:
    return {
        "X-RateLimit-Limit": str(limit),
        "X-RateLimit-Remaining": str(max(0, limit - used)),
        "X-RateLimit-Reset": str(max(1, math.ceil(reset_s))),
    }


def _windows(limits: Limits, used: list[int], now: float) -> dict[int, tuple[int, int, float]]:
    """{limit index: (limit, used, seconds to its reset)} for the limits that are set."""
    minute_reset = MINUTE_S - now % MINUTE_S
    day_reset = DAY_S - now % DAY_S
    values = {
        1: (limits.requests_per_minute, used[0], minute_reset),
        2: (limits.tokens_per_minute, used[1], minute_reset),
        3: (limits.tokens_per_day, used[2], day_reset),
    }
    return {i: (limit, u, r) for i, (limit, u, r) in values.items() if limit is not None}


def outcome(charge_plan: enqueue.ChargePlan, limits: Limits, now: float) -> Charge:
    """What a run plan charged, with the X-RateLimit headers; RateLimited if a limit refused it."""
    assert charge_plan.outcome is not None, "the charge plan was never run"
    status, refused, used = charge_plan.outcome
    windows = _windows(limits, used, now)
    if status == enqueue.RATE_REFUSED:
        raise _limited(windows, refused)
    headers: dict[str, str] = {}
    if windows:
        # The limit closest to being spent is the one a client must watch.
        limit, spent, reset_s = min(windows.values(), key=lambda w: (w[0] - w[1]) / w[0])
        headers = _header_set(limit, spent, reset_s)
    # A request refused later in the same script (queue or channel full) was counted, its tokens were not.
    return Charge(keys=charge_plan.keys, tokens=charge_plan.tokens if status == enqueue.DONE else 0, headers=headers)


def refusal(charge_plan: enqueue.ChargePlan, grant: Grant, now: float) -> RateLimited:
    """The 429 (with its headers) of a plan a limit refused in the script, counted."""
    assert charge_plan.outcome is not None and charge_plan.outcome[0] == enqueue.RATE_REFUSED, "not refused"
    metrics.RATE_LIMITED.labels(metrics.token_label(grant.name, grant.token_id), "rate").inc()
    _, refused, used = charge_plan.outcome
    return _limited(_windows(grant.limits, used, now), refused)


def _limited(windows: dict[int, tuple[int, int, float]], refused: int) -> RateLimited:
    """The 429 of the limit the script refused at, with its headers."""
    limit, spent, reset_s = windows[refused]
    headers = _header_set(limit, spent, reset_s)
    headers["Retry-After"] = headers["X-RateLimit-Reset"]
    what = "requests" if refused == 1 else "input tokens"
    return RateLimited(
        f"rate limit reached: this API token's {_LIMIT_NAMES[refused]} is {limit} and {spent} {what} are "
        f"used; retry in {headers['Retry-After']} s",
        headers=headers,
    )
