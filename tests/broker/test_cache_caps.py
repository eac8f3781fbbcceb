"""The response cache holds at most its caps in bytes, per token and overall, and never evicts a key."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import redis.asyncio

from models_registry.policy import response_cache

PREFIX = "test:"
OUTPUTS = [[0.5] * 1000]  # about 9 KB as msgpack
CAPS = response_cache.Caps(entry_bytes=256 * 1024, token_bytes=50_000, total_bytes=80_000)


@pytest.fixture
async def conn(flushed: str) -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.Redis.from_url(flushed)
    yield client
    await client.aclose()


async def store(conn: redis.asyncio.Redis, key: str, owner: int | None, ttl_s: float = 60,
                caps: response_cache.Caps = CAPS) -> bool:
    return await response_cache.store(conn, PREFIX, f"{PREFIX}cache:m:t:{key}", OUTPUTS, 3, ttl_s, caps, owner)


async def test_one_token_cannot_fill_the_cache_past_its_cap(conn: redis.asyncio.Redis) -> None:
    stored = [await store(conn, f"a{i}", owner=1) for i in range(20)]
    assert stored[0] and not stored[-1]
    assert await response_cache.used_bytes(conn, PREFIX, 1) <= CAPS.token_bytes
    kept = [key async for key in conn.scan_iter(f"{PREFIX}cache:*")]
    assert len(kept) == sum(stored) < 20
    assert await store(conn, "b0", owner=2)  # another token still has its own room


async def test_the_whole_cache_stays_under_its_cap(conn: redis.asyncio.Redis) -> None:
    for owner in range(1, 6):
        for i in range(10):
            await store(conn, f"{owner}-{i}", owner=owner)
    assert await response_cache.used_bytes(conn, PREFIX) <= CAPS.total_bytes
    values = [await conn.strlen(key) async for key in conn.scan_iter(f"{PREFIX}cache:m:*")]
    assert 0 < sum(values) <= CAPS.total_bytes


async def test_a_full_cache_evicts_nothing_else(conn: redis.asyncio.Redis) -> None:
    await conn.rpush(f"{PREFIX}queue", b"a request")  # a queue key: it must survive whatever the cache does
    for i in range(30):
        await store(conn, f"x{i}", owner=1)
    assert await conn.lrange(f"{PREFIX}queue", 0, -1) == [b"a request"]
    assert await conn.exists(f"{PREFIX}cache:m:t:x0")  # the first entries stay until their TTL


async def test_expired_entries_give_their_room_back(conn: redis.asyncio.Redis) -> None:
    assert all([await store(conn, f"s{i}", owner=1, ttl_s=0.2) for i in range(5)])
    assert not await store(conn, "late", owner=1)
    deadline = time.monotonic() + 5
    while not await store(conn, "late", owner=1):  # stored once the first entries' 0.2 s TTL is over
        assert time.monotonic() < deadline, "expired entries never gave their room back"
        await asyncio.sleep(0.05)
    assert await response_cache.used_bytes(conn, PREFIX, 1) < 2 * 10_500


async def test_storing_the_same_key_again_is_not_counted_twice(conn: redis.asyncio.Redis) -> None:
    for _ in range(10):
        assert await store(conn, "same", owner=1)
    single = await response_cache.used_bytes(conn, PREFIX, 1)
    assert 9000 < single < 11_000
