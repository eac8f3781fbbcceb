"""The storage quota held atomically: each upload reserves its bytes in Redis before its body is read.

The quota (policy.file_quota) counts the files a token keeps in the database; uploads of one
token side by side each saw the files kept before any of them was saved, and 16 of them
were all let in (787 KB kept against 200 KB). Now an upload first adds its bytes to the
token's reservations in one script, which answers the bytes reserved by every upload of the
token in flight, its own included; only then are the files kept read from the database, and
kept + reserved must fit. Reserving before reading makes the sum never too small: an upload
that ends in between (its file saved, then its reservation dropped) is counted twice at
worst, never missed. A reservation is dropped when its request is answered, and expires
(a crashed web process) after RESERVATION_TTL_S.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from channels.layers import get_channel_layer

from models_registry.broker.lua import LuaScript
from models_registry.core.conf import conf

logger = logging.getLogger(__name__)

RESERVATION_TTL_S = 3600  # longest an upload's body and its check may take (Django spools it first)
SCOPE_KEY = "hosting.upload_reservation"  # (field, bytes) of the request's own reservation, in its ASGI scope

# KEYS[1]: the token's hash {request field: "bytes:expires"}; ARGV: now, field, bytes, expires, ttl.
_RESERVE = """
local total = 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if all[i] ~= ARGV[2] then
    local bytes, expires = string.match(all[i + 1], '^(%d+):(%d+)$')
    if tonumber(expires) <= tonumber(ARGV[1]) then
      redis.call('HDEL', KEYS[1], all[i])
    else
      total = total + tonumber(bytes)
    end
  end
end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3] .. ':' .. ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return total + tonumber(ARGV[3])
"""
_reserve = LuaScript(_RESERVE)


def _key(layer: Any, owner_id: int) -> str:
    return f"{layer.prefix}uploads:reserved:{owner_id}"


async def reserve(owner_id: int, field: str, size: int) -> int | None:
    """Hold size bytes for this upload (field: the request's id; again: its new size); every upload's in flight.

    None when Redis does not answer: the quota is then checked for this upload alone (not held).
    """
    layer = get_channel_layer()
    now = int(time.time())
    try:
        total = await _reserve(layer.connection(0), [_key(layer, owner_id)],
                               [now, field, max(0, int(size)), now + RESERVATION_TTL_S, RESERVATION_TTL_S])
    except Exception as error:  # no broker: this upload alone is checked against the files kept (as the charge fails open)
        logger.warning("storage quota checked without reservations: the broker did not answer (%s)",
                       type(error).__name__)
        return None
    return int(total)


async def release(owner_id: int, field: str) -> None:
    """Drop this upload's reservation (its file is saved, or it failed)."""
    layer = get_channel_layer()
    try:
        await layer.connection(0).hdel(_key(layer, owner_id), field)
    except Exception:  # it expires by itself
        pass


def enabled() -> bool:
    """Whether a storage quota is set at all (0: none, nothing to reserve)."""
    return conf.FILE_STORAGE_BYTES > 0


async def hold(owner_id: int, field: str, size: int, check: Any) -> None:
    """Reserve size bytes, then check (await check(owner_id, size, reserved)); a refusal drops the reservation."""
    reserved = await reserve(owner_id, field, size)
    try:
        await check(owner_id, size, reserved)
    except BaseException:
        await release(owner_id, field)
        raise
