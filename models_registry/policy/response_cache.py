"""The response cache: results of deterministic tasks kept in Redis, answered by the web.

The key covers everything the answer depends on: the model's source, revision, device,
dtype and load generation, the task and its settings, the merged parameters and the
inputs, and the API token that asked (unless the task shares its cache between tokens). A reload ("Load now" bumps the generation) or a settings change therefore
misses by construction, and stale entries simply expire with their TTL. Entries are
the worker's outputs as msgpack (the same bytes the reply carried), so a hit goes
through the same response shaping as a miss and its body is byte-identical.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import msgpack

from models_registry.media import item as media_item
from models_registry.registry.specs import ModelSpec, TaskSpec


@dataclass(frozen=True)
class CachedResult:
    """A stored answer: the worker's outputs and the input tokens it counted."""

    outputs: list[Any]
    tokens: int


def wanted(body: Any) -> bool:
    """False when the request asks for a fresh computation (the HF Inference API's options.use_cache: false)."""
    options = body.get("options") if isinstance(body, dict) else None
    return not (isinstance(options, dict) and options.get("use_cache") is False)


def cache_key(prefix: str, spec: ModelSpec, task: TaskSpec, parameters: dict[str, Any], inputs: list[Any],
              token_id: int | None = None) -> str:
    """The Redis key of this exact request's answer, for this API token unless the task shares its cache.

    Per token by default: a shared entry tells any token whether another sent the same input.
    """
    owner = None if task.cache_shared else token_id
    identity = [
        list(spec.load_key()), task.name, task.task, task.pooling, task.normalize,
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


async def store(conn: Any, key: str, outputs: list[Any], tokens: int, ttl_s: int, max_bytes: int) -> bool:
    """Keep an answer for ttl_s seconds unless it is over max_bytes; whether it was stored."""
    raw = encode(outputs, tokens)
    if len(raw) > max_bytes:
        return False
    await conn.set(key, raw, ex=ttl_s)
    return True
