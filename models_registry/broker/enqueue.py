"""One request, one round trip: charge the token's rate-limit windows, admit into the task's queue, send.

Before, the web spent three Redis round trips on every request (the rate-limit charge,
admission and the send, each its own script); this script does all three atomically, so
a request is charged, admitted and queued, or refused with nothing half done. Each part
is optional (a cached answer is charged alone; a token without limits skips the
charge), and the parts keep the semantics of the scripts they replace:

- charge: every limit is checked, then the request and its estimated input tokens are
  counted in the UTC minute, day and month windows (policy.rate_limits reads the result);
- admit: expired entries leave the task's pending set; over max_queue_size the request is
  refused (it still counts as a request, its tokens do not: a refusal costs no compute);
- send: the message joins the work channel (capacity and expiry as the layer's send) and
  rings its doorbell.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from models_registry.broker import turn_pipeline
from models_registry.broker.lua import LuaScript

DONE, RATE_REFUSED, QUEUE_FULL, CHANNEL_FULL = 0, 1, 2, 3

# KEYS: [usage minute, day, month] if charging, then [pending set] if admitting, then [channel, doorbell]
# if sending. ARGV[1..3]: charging, admitting, sending (0/1); then each part's arguments, in that order:
# charge: rpm, tpm, tpd (-1 = none), tokens, minute ttl, day ttl, month ttl;
# admit: now, limit, deadline, n, n members; send: message, score, expiry, capacity, now.
# Returns {status, refused limit (1-3), requests this minute, tokens this minute, tokens today, depth}.
_ENQUEUE = """
local charging, admitting, sending = ARGV[1] == '1', ARGV[2] == '1', ARGV[3] == '1'
local k, a = 1, 4
local mr, mt, dt, tokens, depth = 0, 0, 0, 0, 0
local usage, ttl = {}, {}
if charging then
  usage = {KEYS[1], KEYS[2], KEYS[3]}
  k = 4
  local rpm, tpm, tpd = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  tokens = tonumber(ARGV[a + 3])
  ttl = {ARGV[a + 4], ARGV[a + 5], ARGV[a + 6]}
  a = a + 7
  local minute = redis.call('HMGET', usage[1], 'r', 't')
  mr, mt = tonumber(minute[1] or '0'), tonumber(minute[2] or '0')
  dt = tonumber(redis.call('HGET', usage[2], 't') or '0')
  if rpm >= 0 and mr + 1 > rpm then return {1, 1, mr, mt, dt, 0} end
  if tpm >= 0 and mt + tokens > tpm then return {1, 2, mr, mt, dt, 0} end
  if tpd >= 0 and dt + tokens > tpd then return {1, 3, mr, mt, dt, 0} end
  for i = 1, 3 do
    redis.call('HINCRBY', usage[i], 'r', 1)
    redis.call('EXPIRE', usage[i], ttl[i])
  end
  mr = mr + 1
end
local pending, n = nil, 0
if admitting then
  pending = KEYS[k]
  k = k + 1
  n = tonumber(ARGV[a + 3])
  redis.call('ZREMRANGEBYSCORE', pending, '-inf', ARGV[a])
  depth = redis.call('ZCARD', pending)
  if depth + n > tonumber(ARGV[a + 1]) then return {2, 0, mr, mt, dt, depth} end
end
if sending then
  local s = a + (admitting and 4 + n or 0)
  redis.call('ZREMRANGEBYSCORE', KEYS[k], 0, tonumber(ARGV[s + 4]) - tonumber(ARGV[s + 2]))
  if redis.call('ZCARD', KEYS[k]) >= tonumber(ARGV[s + 3]) then return {3, 0, mr, mt, dt, depth} end
  redis.call('ZADD', KEYS[k], ARGV[s + 1], ARGV[s])
  redis.call('EXPIRE', KEYS[k], ARGV[s + 2])
  redis.call('LPUSH', KEYS[k + 1], 1)
  redis.call('LTRIM', KEYS[k + 1], 0, 63)
  redis.call('EXPIRE', KEYS[k + 1], ARGV[s + 2])
end
if admitting then
  for i = 1, n do redis.call('ZADD', pending, ARGV[a + 2], ARGV[a + 3 + i]) end
  redis.call('EXPIRE', pending, 3600)
end
if charging and tokens ~= 0 then
  for i = 1, 3 do redis.call('HINCRBY', usage[i], 't', tokens) end
  mt, dt = mt + tokens, dt + tokens
end
return {0, 0, mr, mt, dt, depth}
"""
_enqueue = LuaScript(_ENQUEUE)


@dataclass
class ChargePlan:
    """A rate-limit charge to make in the same script as the request's admission and send.

    The policy gate makes the plan; the hand-off runs it and leaves the outcome here for
    the gate to read (429 and the X-RateLimit headers).
    """

    keys: list[str]  # the token's usage windows: minute, day, month
    limits: list[int]  # requests per minute, tokens per minute, tokens per day (-1 = none)
    tokens: int  # the input tokens to charge (the web's estimate)
    ttls: list[int]  # how long each window's key lives: minute, day, month
    outcome: tuple[int, int, list[int]] | None = None  # (status, refused limit, [r/min, t/min, t/day]) once run


class ChargeRefused(Exception):
    """A rate limit refused the request in the enqueue script (the gate answers 429 from the plan)."""


@dataclass(frozen=True)
class QueuePlaces:
    """The request's places in its task's queue."""

    pending_key: str
    members: list[str]
    deadline: float
    limit: int
    now: float


@dataclass(frozen=True)
class Send:
    """The work message and where it goes (the layer fills these in)."""

    channel_key: str
    doorbell_key: str
    message: bytes
    score: float
    expiry: int
    capacity: int
    now: float


async def run(conn: Any, plan: ChargePlan | None, admission: QueuePlaces | None = None,
              send: Send | None = None) -> tuple[int, int]:
    """Run the parts given in one round trip: (status, depth before this request); the charge lands in plan."""
    keys: list[Any] = []
    args: list[Any] = ["1" if plan else "0", "1" if admission else "0", "1" if send else "0"]
    if plan is not None:
        keys += plan.keys
        args += [*plan.limits, plan.tokens, *plan.ttls]
    if admission is not None:
        keys.append(admission.pending_key)
        args += [repr(admission.now), admission.limit, repr(admission.deadline), len(admission.members),
                 *admission.members]
    if send is not None:
        keys += [send.channel_key, send.doorbell_key]
        args += [send.message, repr(send.score), send.expiry, send.capacity, repr(send.now)]
    result = await turn_pipeline.shared.call(conn, _enqueue, keys, args)  # with this turn's other requests
    status, refused = int(result[0]), int(result[1])
    if plan is not None:
        plan.outcome = (status, refused, [int(v) for v in result[2:5]])
    return status, int(result[5])
