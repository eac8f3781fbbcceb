"""The storage quota held atomically: each upload reserves its bytes in Redis before its body is read.

The quota (policy.file_quota) counts the files a token keeps in the database; uploads of one
token side by side each saw the files kept before any of them was saved, and 16 of them
were all let in (787 KB kept against 200 KB). Now an upload, under the token's lock in Redis
(held for one database read), reads the bytes every other upload of the token in flight has
reserved (one script, which also drops expired ones), then the files kept, and reserves its
own bytes only if kept + reserved + its own fit. Dropping a reservation (its file saved, or
the upload failed) takes the same lock, so no check sees a file neither kept nor reserved;
a refused upload never holds a reservation, so it cannot crowd out one that fits. A
reservation is dropped when its request is answered, and expires (a crashed web process)
after RESERVATION_TTL_S. A batch's output chunks reserve and settle the same way (jobs.output_quota).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any

from channels.layers import get_channel_layer

from models_registry.broker.lua import LuaScript
from models_registry.core.conf import conf
from models_registry.core.errors import HostingError, RateLimited

logger = logging.getLogger(__name__)

RESERVATION_TTL_S = 3600  # longest an upload's body and its check may take (Django spools it first)
LOCK_TTL_MS = 5000  # a lock whose holder died frees itself
LOCK_WAIT_S = 5.0  # longest an upload waits for the others' checks

# KEYS[1]: the token's hash {request field: "bytes:expires"}; ARGV: now, the field left out. The others' bytes.
_OTHERS = LuaScript("""
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
return total
""")
_UNLOCK = LuaScript("""
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
""")


@dataclass(frozen=True)
class Reservation:
    """An upload's bytes held of its token's quota: whose, under which field (its request's id), how many."""

    owner_id: int
    field: str
    size: int


def _key(layer: Any, owner_id: int) -> str:
    return f"{layer.prefix}uploads:reserved:{owner_id}"


async def _acquire(conn: Any, lock: str) -> str:
    """Take the token's lock: its holder's token (RateLimited when the others' checks hold it past LOCK_WAIT_S)."""
    token = uuid.uuid4().hex
    deadline = time.monotonic() + LOCK_WAIT_S
    while not await conn.set(lock, token, nx=True, px=LOCK_TTL_MS):
        if time.monotonic() > deadline:
            raise RateLimited("uploads of this API token are checked against its storage quota one at a time, "
                              "and too many are waiting; retry in a second", headers={"Retry-After": "1"})
        await asyncio.sleep(0.005)
    return token


@asynccontextmanager
async def _locked(conn: Any, lock: str) -> AsyncIterator[None]:
    """The token's lock, for one check (429 when the others' checks take over LOCK_WAIT_S)."""
    token = await _acquire(conn, lock)
    try:
        yield
    finally:
        await _UNLOCK(conn, [lock], [token])


async def hold(owner_id: int, field: str, size: int, check: Any) -> None:
    """Reserve size bytes for this upload (field: the request's id; again: its new size) if they fit.

    check(owner_id, size, reserved) reads the files kept and raises when kept + reserved (the
    others' and these bytes) is over the quota. Redis away: the upload alone is checked (as the
    rate limits fail open), nothing is held.
    """
    layer = get_channel_layer()
    conn, key = layer.connection(0), _key(layer, owner_id)
    try:
        async with _locked(conn, f"{key}:lock"):
            others = await _OTHERS(conn, [key], [int(time.time()), field])
            await check(owner_id, size, int(others) + size)
            expires = int(time.time()) + RESERVATION_TTL_S
            await conn.hset(key, field, f"{max(0, int(size))}:{expires}")
            await conn.expire(key, RESERVATION_TTL_S)
    except HostingError:  # over the quota (or the lock's wait): the answer
        raise
    except Exception as error:
        logger.warning("storage quota checked without reservations: the broker did not answer (%s)",
                       type(error).__name__)
        await check(owner_id, size, None)


async def release(owner_id: int, field: str) -> None:
    """Drop this upload's reservation (the upload failed, or its file is kept already), under the token's lock."""
    layer = get_channel_layer()
    with suppress(Exception):
        if not await layer.connection(0).hexists(_key(layer, owner_id), field):
            return  # settled as its file was kept (or never held): no lock to wait for after the answer
    async with settling(owner_id, field):
        pass


@asynccontextmanager
async def settling(owner_id: int, field: str) -> AsyncIterator[None]:
    """Under the token's lock, the block makes the upload's file kept (its database row); then its reservation goes.

    No check runs between the two, so none counts the file twice, kept and still reserved (a
    burst of uploads that fit was refused in part), or not at all. Without the lock (Redis
    away, or the others' checks past LOCK_WAIT_S) the file is recorded all the same, and a
    reservation that could not be dropped expires by itself.
    """
    layer = get_channel_layer()
    conn, key = layer.connection(0), _key(layer, owner_id)
    lock = f"{key}:lock"
    try:
        token: str | None = await _acquire(conn, lock)
    except Exception:
        token = None
    try:
        yield
        with suppress(Exception):
            await conn.hdel(key, field)
    finally:
        if token is not None:
            with suppress(Exception):
                await _UNLOCK(conn, [lock], [token])


def enabled() -> bool:
    """Whether a storage quota is set at all (0: none, nothing to reserve)."""
    return conf.FILE_STORAGE_BYTES > 0
