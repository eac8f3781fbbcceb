"""Which live workers hold which models, how many requests wait per model, and one loader per cold model.

Each worker refreshes, a few times a second, one sorted set per model it holds (member:
its id, score: the time); an entry older than HOLDER_TTL_S belongs to a dead worker and is
ignored. A worker about to load a model nobody holds claims it first (SET NX with a
TTL), so two idle workers do not both load the same cold model for the same request.
"""

from __future__ import annotations

import time
from typing import Any

from models_registry.broker.messages import model_channel

HOLDER_TTL_S = 3.0
CLAIM_TTL_S = 60.0  # longer than a load; the claim is deleted when the load ends


def holders_key(layer: Any, model: str) -> str:
    """The workers holding one model, scored by their last refresh."""
    return f"{layer.prefix}holders:{model}"


def claim_key(layer: Any, model: str) -> str:
    """Set while one worker loads a model."""
    return f"{layer.prefix}loading:{model}"


async def refresh(layer: Any, worker_id: str, held: list[str], dropped: list[str]) -> None:
    """Say this worker holds held (and no longer holds dropped)."""
    if not held and not dropped:
        return
    now = time.time()
    async with layer.connection(0).pipeline(transaction=False) as pipe:
        for model in held:
            pipe.zadd(holders_key(layer, model), {worker_id: now})
            pipe.expire(holders_key(layer, model), 3600)
        for model in dropped:
            pipe.zrem(holders_key(layer, model), worker_id)
        await pipe.execute()


async def survey(layer: Any, worker_id: str, models: list[str]) -> tuple[dict[str, int], dict[str, int]]:
    """({model: requests waiting in its channel}, {model: live workers other than this one holding it})."""
    if not models:
        return {}, {}
    since = time.time() - HOLDER_TTL_S
    backlog: dict[str, int] = {}
    by_server: dict[int, list[str]] = {}
    for model in models:  # channels may live on several servers: one pipeline per server
        by_server.setdefault(layer._index(model_channel(model)), []).append(model)
    for index, names in by_server.items():
        async with layer.connection(index).pipeline(transaction=False) as pipe:
            for model in names:
                pipe.zcard(layer._key(model_channel(model)))
            for model, depth in zip(names, await pipe.execute()):
                backlog[model] = int(depth)
    async with layer.connection(0).pipeline(transaction=False) as pipe:
        for model in models:
            pipe.zrangebyscore(holders_key(layer, model), since, "+inf")
        found = await pipe.execute()
    holders = {}
    for model, members in zip(models, found):
        names = {m.decode() if isinstance(m, bytes) else str(m) for m in members}
        holders[model] = len(names - {worker_id})
    return backlog, holders


async def claim(layer: Any, model: str, worker_id: str) -> bool:
    """Become the one worker loading model now (False: another one is)."""
    return bool(await layer.connection(0).set(claim_key(layer, model), worker_id, nx=True, px=int(CLAIM_TTL_S * 1000)))


async def unclaim(layer: Any, model: str) -> None:
    """The load ended (ready or failed)."""
    await layer.connection(0).delete(claim_key(layer, model))
