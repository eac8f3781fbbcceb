"""Per-token rate limits and quotas, shared by every web replica through one Lua script.

Fixed windows: the current UTC minute and UTC day. One script reads every window, checks
every limit and charges the request in the same step, so two replicas can never both
take the last place. Input tokens are charged as the web's estimate when the request is
admitted and corrected to the worker's exact count once the answer is in; a request
that failed is refunded its tokens (it still counts as a request).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from models_registry.broker import enqueue
from models_registry.broker.lua import LuaScript
from models_registry.catalog import compute_cost
from models_registry.core.errors import HostingError, TooLarge
from models_registry.media import item as media_item
from models_registry.observe import metrics


MINUTE_S = 60
DAY_S = 86_400
MONTH_TTL_S = 62 * DAY_S
BYTES_PER_TOKEN = 4  # English text: about 4 UTF-8 bytes per subword token
SPECIAL_TOKENS = 2  # [CLS] and [SEP] (or <s> and </s>) around every input

# The check-and-charge itself is part of broker.enqueue's script: a request is charged, admitted
# and sent in one round trip (or charged alone, when a cached answer may serve it).

# Correct the tokens charged to these windows; a window that already expired stays gone.
_SETTLE = """
for i = 1, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then redis.call('HINCRBY', KEYS[i], 't', ARGV[1]) end
end
return 1
"""
_settle = LuaScript(_SETTLE)

@dataclass(frozen=True)
class Limits:
    """A token's limits; None = no limit."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    tokens_per_day: int | None = None


class Grant(Protocol):
    """What a charge reads of the token it charges (policy.auth.TokenGrant, which imports this module)."""

    token_id: int
    name: str
    limits: Limits


@dataclass
class Charge:
    """What an admitted request was charged, to correct once its answer is in."""

    keys: list[str]
    tokens: int
    headers: dict[str, str] = field(default_factory=dict)


def estimate_tokens(inputs: list[Any], task: str | None = None, parameters: dict[str, Any] | None = None,
                    media: media_item.MediaCount | None = None) -> int:
    """Tokens as the web can count them without a tokenizer: UTF-8 bytes / 4, plus specials.

    With the task and its merged parameters, what the model will compute (catalog.compute_cost):
    a prompt with every input, one pass per zero-shot label, windows, generated tokens.
    media: the inputs' media, counted already (media.item.count); None: counted here.
    """
    media = media_item.count(inputs) if media is None else media
    if task is not None and not media.items:
        try:
            return sum(compute_cost.request_cost(task, inputs, parameters or {}, compute_cost.ESTIMATE))
        except HostingError:
            pass  # an impossible window is the worker's 400 to give: charge the inputs alone
    total = 0
    for position, item in enumerate(inputs):
        if media.items and media.tokens[position] is not None:
            # an image or clip: its patch tokens or frames (the worker's count settles it)
            total += media.tokens[position]  # type: ignore[operator]
            continue
        text = item if isinstance(item, str) else " ".join(str(v) for v in item.values())
        total += math.ceil(len(text.encode()) / BYTES_PER_TOKEN) + SPECIAL_TOKENS
    return total


def usage_keys(prefix: str, token_id: int, now: float) -> list[str]:
    """The token's counters for the UTC minute, day and month holding now."""
    month = time.strftime("%Y%m", time.gmtime(now))
    return [
        f"{prefix}usage:{token_id}:minute:{int(now // MINUTE_S)}",
        f"{prefix}usage:{token_id}:day:{int(now // DAY_S)}",
        f"{prefix}usage:{token_id}:month:{month}",
    ]


def check_size(limits: Limits, tokens: int) -> None:
    """413 for a request that no window could ever take, whatever the client waits."""
    for name, limit in (("tokens_per_minute", limits.tokens_per_minute), ("tokens_per_day", limits.tokens_per_day)):
        if limit is not None and tokens > limit:
            raise TooLarge(f"this request counts about {tokens} input tokens, over this API token's "
                           f"{name} limit of {limit}: send fewer or shorter inputs per request")


def plan(prefix: str, token_id: int, limits: Limits, tokens: int, now: float) -> enqueue.ChargePlan:
    """The charge of one request of tokens input tokens, to run in broker.enqueue's script."""
    check_size(limits, tokens)
    windows = (limits.requests_per_minute, limits.tokens_per_minute, limits.tokens_per_day)
    return enqueue.ChargePlan(keys=usage_keys(prefix, token_id, now), limits=[-1 if w is None else w for w in windows],
                              tokens=tokens, ttls=[2 * MINUTE_S, 2 * DAY_S, MONTH_TTL_S])


def charge_plan(prefix: str, grant: Grant, inputs: list[Any], task: str | None, parameters: dict[str, Any] | None,
                now: float, media: media_item.MediaCount | None = None) -> enqueue.ChargePlan:
    """The charge of one request of grant's token, estimated from inputs (task and parameters: what the model
    will compute); TooLarge (413, counted) when no window could ever take it."""
    try:
        return plan(prefix, grant.token_id, grant.limits, estimate_tokens(inputs, task, parameters, media), now)
    except HostingError:
        metrics.RATE_LIMITED.labels(metrics.token_label(grant.name, grant.token_id), "size").inc()
        raise


async def settle(conn: Any, charge: Charge, actual_tokens: int) -> None:
    """Correct the charged tokens to what the worker counted (0 refunds them all)."""
    delta = actual_tokens - charge.tokens
    if delta:
        await _settle(conn, charge.keys, [delta])


@dataclass(frozen=True)
class Usage:
    """A token's requests and input tokens in one window."""

    requests: int = 0
    tokens: int = 0


def read_usage(client: Any, prefix: str, token_ids: list[int],
               now: float | None = None) -> dict[int, tuple[Usage, Usage]]:
    """(today, this month) per token, read with a sync redis client in one round trip (admin)."""
    now = time.time() if now is None else now
    pipe = client.pipeline(transaction=False)
    for token_id in token_ids:
        _, day, month = usage_keys(prefix, token_id, now)
        pipe.hmget(day, "r", "t")
        pipe.hmget(month, "r", "t")
    values = pipe.execute()
    usage: dict[int, tuple[Usage, Usage]] = {}
    for position, token_id in enumerate(token_ids):
        day, month = values[2 * position], values[2 * position + 1]
        usage[token_id] = (Usage(int(day[0] or 0), int(day[1] or 0)), Usage(int(month[0] or 0), int(month[1] or 0)))
    return usage
