"""The response cache: results of deterministic tasks kept in Redis, answered by the web.

The key covers everything the answer depends on: the model's source, revision, device,
dtype and load generation, the task and its settings, the merged parameters and the
inputs, and the API token that asked (unless the task shares its cache between tokens). A reload ("Load now" bumps the generation) or a settings change therefore
misses by construction, and stale entries simply expire with their TTL. Entries are
the worker's outputs as msgpack (the same bytes the reply carried), so a hit goes
through the same response shaping as a miss and its body is byte-identical.

The cache is bounded in bytes, per token (HOSTING_CACHE_MAX_TOKEN_BYTES, charged to the
token whose request stored the entry) and overall (HOSTING_CACHE_MAX_BYTES). The broker
runs with maxmemory 0, as its queues need (an evicted queue key would lose requests), so
Redis is never asked to evict: one script keeps a ledger of the live entries (a ZSET by
expiry and their sizes), drops what has expired from it, and refuses to store an entry
that would take its token or the whole cache over its cap. Entries leave only by their TTL.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

import msgpack

from models_registry.broker.lua import LuaScript
from models_registry.media import item as media_item
from models_registry.catalog.specs import ModelSpec, TaskSpec


@dataclass(frozen=True)
class CachedResult:
    """A stored answer: the worker's outputs and the input tokens it counted."""

    outputs: list[Any]
    tokens: int


def cache_key(prefix: str, spec: ModelSpec, task: TaskSpec, parameters: dict[str, Any], inputs: list[Any],
              token_id: int | None = None) -> str:
    """The Redis key of this exact request's answer, for this API token unless the task shares its cache.

    Per token by default: a shared entry tells any token whether another sent the same input.
    The live version's number is part of it: after Load now's switch (same source) old answers miss.
    """
    owner = None if task.cache_shared else token_id
    identity = [
        list(spec.load_key()), [[a.source, a.revision] for a in spec.adapters] if spec.base else [], spec.version,
        task.name, task.task, task.pooling, task.normalize,
        task.parameters, parameters, [media_item.identity(i) for i in inputs], owner,  # a file by its bytes' digest
    ]
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    return f"{prefix}cache:{spec.name}:{task.name}:{digest}"


def encode(outputs: list[Any], tokens: int) -> bytes:
    """An entry's stored bytes."""
    return msgpack.packb([outputs, tokens], use_bin_type=True)


def decode(raw: bytes) -> CachedResult:
    """An entry read back."""
    outputs, tokens = msgpack.unpackb(raw, raw=False)
    return CachedResult(outputs=outputs, tokens=int(tokens))


async def lookup(conn: Any, key: str) -> CachedResult | None:
    """The stored answer, or None."""
    raw = await conn.get(key)
    return None if raw is None else decode(raw)


ENTRY_OVERHEAD_BYTES = 96  # what Redis keeps per key besides its name and value (dict entry, object headers)
EXPIRED_PER_STORE = 64  # ledger entries one store drops at most (the rest go with the next stores)

# KEYS: entry, ledger (ZSET entry -> expiry ms), sizes (HASH entry -> "bytes owner"), used (HASH owner -> bytes,
# and "*" -> all). ARGV: value, ttl ms, now ms, entry bytes, owner, owner cap, overall cap, expired entries to drop.
# Returns 1: stored, 0: over a cap (and the key is gone: an older answer under it is not kept uncounted).
_STORE = """
local function forget(entry)
  local held = redis.call('HGET', KEYS[3], entry)
  if held then
    local bytes, owner = string.match(held, '^(%d+) (.*)$')
    redis.call('HINCRBY', KEYS[4], owner, -tonumber(bytes))
    redis.call('HINCRBY', KEYS[4], '*', -tonumber(bytes))
    redis.call('HDEL', KEYS[3], entry)
  end
  redis.call('ZREM', KEYS[2], entry)
end
local now = tonumber(ARGV[3])
for _, entry in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[8]))) do
  forget(entry)
end
forget(KEYS[1])
local size, owner = tonumber(ARGV[4]), ARGV[5]
local mine = tonumber(redis.call('HGET', KEYS[4], owner) or '0')
local all = tonumber(redis.call('HGET', KEYS[4], '*') or '0')
if mine + size > tonumber(ARGV[6]) or all + size > tonumber(ARGV[7]) then
  redis.call('DEL', KEYS[1])
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), KEYS[1])
redis.call('HSET', KEYS[3], KEYS[1], size .. ' ' .. owner)
redis.call('HINCRBY', KEYS[4], owner, size)
redis.call('HINCRBY', KEYS[4], '*', size)
return 1
"""
_store = LuaScript(_STORE)


def ledger_keys(prefix: str) -> list[str]:
    """The cache's accounting keys (the ledger by expiry, the sizes, the bytes used per owner and in all)."""
    return [f"{prefix}cache-ledger", f"{prefix}cache-sizes", f"{prefix}cache-used"]


@dataclass(frozen=True)
class Caps:
    """How much the cache may hold: one entry, one token's entries, every entry."""

    entry_bytes: int
    token_bytes: int
    total_bytes: int


async def store(conn: Any, prefix: str, key: str, outputs: list[Any], tokens: int, ttl_s: int, caps: Caps,
                owner: int | None) -> bool:
    """Keep an answer for ttl_s seconds, charged to owner (a token id), unless it goes over a cap; whether it was."""
    raw = encode(outputs, tokens)
    if len(raw) > caps.entry_bytes:
        return False
    size = len(raw) + len(key) + ENTRY_OVERHEAD_BYTES
    now_ms = int(time.time() * 1000)
    stored = await _store(conn, [key, *ledger_keys(prefix)],
                          [raw, max(1, int(ttl_s * 1000)), now_ms, size, "none" if owner is None else str(owner),
                           caps.token_bytes, caps.total_bytes, EXPIRED_PER_STORE])
    return bool(stored)


async def used_bytes(conn: Any, prefix: str, owner: int | None = None) -> int:
    """Bytes the ledger holds for owner (None: for every owner), as of the last store."""
    raw = await conn.hget(ledger_keys(prefix)[2], "*" if owner is None else str(owner))
    return int(raw or 0)
